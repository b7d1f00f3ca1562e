"""The shared ``conntrack -D`` command and the count read from its output."""

import pytest

from platformd.nodeproxy import conntrack
from platformd.nodeproxy.kernel import KernelError


def test_command_names_the_family_of_the_address():
    assert conntrack.delete_command("conntrack", "UDP", "10.96.0.10", 53) == [
        "conntrack", "-D", "-f", "ipv4", "-p", "udp", "--orig-dst", "10.96.0.10", "--dport", "53"]
    assert conntrack.delete_command("/usr/sbin/conntrack", "TCP", "fd00:96::10", 80, "fd00:244::1")[2:4] == [
        "-f", "ipv6"]
    assert conntrack.delete_command("conntrack", "TCP", "fd00:96::10", 80, "fd00:244::1")[-2:] == [
        "--reply-src", "fd00:244::1"]


@pytest.mark.parametrize("returncode, stderr, expected", [
    (0, "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n", 2),
    (0, "conntrack v1.4.7 (conntrack-tools): 1 flow entry has been deleted.\n", 1),
    (1, "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n", 0),  # nothing matched
    (0, "", 0),
])
def test_count_read_from_the_output(returncode, stderr, expected):
    assert conntrack.deleted_count(returncode, "", stderr) == expected


def test_a_real_failure_is_a_kernel_error():
    with pytest.raises(KernelError, match="Operation not permitted"):
        conntrack.deleted_count(1, "", "conntrack v1.4.7 (conntrack-tools): Operation failed: Operation not permitted\n")


class _Done:
    def __init__(self, returncode, stderr):
        self.returncode, self.stdout, self.stderr = returncode, "", stderr


def test_both_modes_run_the_same_command(monkeypatch):
    from platformd.nodeproxy import kernel_firewall, nftkernel
    seen = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        return _Done(0, "conntrack v1.4.7 (conntrack-tools): 3 flow entries have been deleted.\n")

    monkeypatch.setattr(kernel_firewall.subprocess, "run", fake_run)
    monkeypatch.setattr(nftkernel.subprocess, "run", fake_run)
    fw = kernel_firewall.LinuxFirewall(conntrack="conntrack")
    nft = nftkernel.NftCli(nft="nft", conntrack="conntrack")
    assert fw.clear_conntrack("UDP", "fd00:96::10", 53, "fd00:244::1") == 3
    assert nft.clear_conntrack("UDP", "fd00:96::10", 53, "fd00:244::1") == 3
    assert seen[0] == seen[1] == conntrack.delete_command("conntrack", "UDP", "fd00:96::10", 53, "fd00:244::1")
