"""Shared pytest fixtures for the whole suite."""
