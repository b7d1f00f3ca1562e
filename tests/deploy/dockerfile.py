"""Just enough of a Dockerfile parser to check deploy/Dockerfile without Docker.

Handles what that file uses: comments, ``\\`` line continuations, ``ARG``
defaults before the first ``FROM`` (substituted into ``FROM``), stages, and
the exec (JSON) form of ``ENTRYPOINT``/``CMD``. Not a general implementation
of the Dockerfile grammar.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Instruction:
    keyword: str        # upper case: FROM, RUN, COPY, ...
    value: str          # the rest of the logical line, continuations joined


@dataclass
class Stage:
    image: str                      # FROM image, ARGs substituted
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for inst in self.all("ENV"):
            for item in shlex.split(inst.value):
                key, _, value = item.partition("=")
                env[key] = value
        return env

    def exec_form(self, keyword: str) -> list[str]:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword}, found {len(found)}"
        value = json.loads(found[0].value)
        assert isinstance(value, list), f"{keyword} must use the exec (JSON) form"
        return value


def logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue                    # comments may sit inside a continuation
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        if current.strip():
            lines.append(current.strip())
        current = ""
    if current.strip():
        lines.append(current.strip())
    return lines


def parse(text: str) -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "ARG" and not stages:
            name, _, default = value.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            parts = value.split()
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(image=image, name=name))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append(Instruction(keyword, value))
    return stages


def apt_packages(run: str, verb: str) -> set[str]:
    """Packages named after ``apt-get <verb>`` in each command of a RUN line."""
    packages: set[str] = set()
    for command in re.split(r"&&|;", run):
        words = shlex.split(command)
        if words[:1] == ["apt-get"] and verb in words:
            after = words[words.index(verb) + 1:]
            packages |= {w for w in after if not w.startswith("-")}
    return packages
