"""ipsets on Linux: :class:`~.kernel.IPSets` through nfnetlink.

Members are added and deleted by the thousand, many messages per
``sendmsg`` on one socket opened once, encoded by hand
(:mod:`.ipset_netlink`). Creating, flushing and destroying sets go through
the same socket, with the set type's highest revision asked of the kernel
first.
"""

from __future__ import annotations

import errno
import socket
from typing import Sequence

from . import ipset_netlink as ipsetnl
from .kernel import (
    AddIPSetEntry,
    DeleteIPSetEntry,
    Exists,
    IPSetEntry,
    IPSetOp,
    IPSetSpec,
    IPVSUnavailable,
    KernelError,
    NotFound,
)
from .kernel_common import NetlinkSubsystem, _batch, _error
from .netlink import NETLINK_NETFILTER, NLM_F_EXCL, NetlinkSocket, parse_attrs

__all__ = ["LinuxIPSets"]

# ipset error numbers (include/uapi/linux/netfilter/ipset/ip_set.h).
_IPSET_ERR_FIND_TYPE = 4098
_IPSET_ERR_BUSY = 4100
_IPSET_ERR_EXIST = 4103
_IPSET_CMD_HEADER = 12

_IPSET_METHODS = {AddIPSetEntry: ipsetnl.CMD_ADD, DeleteIPSetEntry: ipsetnl.CMD_DEL}


def _describe(op: IPSetOp) -> str:
    if type(op) is AddIPSetEntry:
        return f"adding {op.entry} to ipset {op.name}"
    return f"deleting {op.entry} from ipset {op.name}"


class LinuxIPSets(NetlinkSubsystem[IPSetOp]):
    """:class:`~.kernel.IPSets` on the running kernel (socket opened on first use)."""

    def __init__(self) -> None:
        super().__init__()
        self._set_types: dict[str, str] = {}  # ipset name -> type, see _set_type_cached
        self._revisions: dict[tuple[str, int], int] = {}  # (set type, family) -> highest revision

    def _open(self) -> NetlinkSocket:
        return NetlinkSocket(NETLINK_NETFILTER)

    def _apply(self, ops: Sequence[IPSetOp]) -> list[KernelError | None]:
        results: list[KernelError | None] = [None] * len(ops)
        requests, positions = [], []
        for i, op in enumerate(ops):
            name, entry = op
            try:
                set_type = self._set_type_cached(name)
                payload = ipsetnl.change(_IPSET_METHODS[type(op)], name, set_type, entry)
            except KernelError as err:
                results[i] = err
                continue
            except (ValueError, TypeError, AttributeError, KeyError, OSError) as exc:
                results[i] = KernelError(f"{_describe(op)}: {exc}", errno.EINVAL)
                continue
            # Without NLM_F_EXCL the kernel takes an existing (ADD) or missing
            # (DEL) member as success (IPSET_FLAG_EXIST); the interface wants
            # Exists/NotFound, as ipset(8) without -exist reports them.
            requests.append((ipsetnl.msg_type(_IPSET_METHODS[type(op)]), NLM_F_EXCL, payload))
            positions.append(i)
        codes = _batch(self._socket(), requests) if requests else []
        for i, code in zip(positions, codes):
            if code:
                op = ops[i]
                results[i] = self._ipset_error(code, _describe(op),
                                               Exists if type(op) is AddIPSetEntry else NotFound)
                if not isinstance(results[i], (Exists, NotFound)):
                    self._set_types.pop(op[0], None)  # perhaps not the type we think
        return results

    @staticmethod
    def _ipset_error(code: int, what: str, on_exist=None) -> KernelError:
        if code == _IPSET_ERR_EXIST and on_exist is not None:
            return on_exist(what)
        if code == _IPSET_ERR_BUSY:
            return KernelError(f"{what}: set is in use by a kernel component", errno.EBUSY)
        if code == _IPSET_ERR_FIND_TYPE:
            return IPVSUnavailable("ip_set", f"{what}: set type not supported")
        return _error(code, what)
    # -- ipsets ------------------------------------------------------------------
    def _ipset_command(self, cmd: int, payload: bytes, what: str, flags: int = 0) -> None:
        """One acked ipset request (create, flush, destroy)."""
        [code] = _batch(self._socket(), [(ipsetnl.msg_type(cmd), flags, payload)])
        if code:
            raise self._ipset_error(code, what)

    def _ipset_revision(self, set_type: str, family: int) -> int:
        """The highest revision of ``set_type`` this kernel has (remembered)."""
        key = (set_type, family)
        if key not in self._revisions:
            what = f"ipset type {set_type}"
            try:
                bodies = self._socket().request(ipsetnl.msg_type(ipsetnl.CMD_TYPE),
                                                     ipsetnl.type_request(set_type, family))
            except OSError as exc:
                raise self._ipset_error(exc.errno, what) from exc
            revision = ipsetnl.parse_revision(bodies)
            if revision is None:
                raise IPVSUnavailable("ip_set", f"{what}: the kernel named no revision")
            self._revisions[key] = revision
        return self._revisions[key]

    def _set_type(self, name: str) -> str:
        """The set's type, read from the kernel (and remembered)."""
        self._set_types.pop(name, None)
        try:
            bodies = self._socket().request(ipsetnl.msg_type(_IPSET_CMD_HEADER), ipsetnl.list_request(name))
        except OSError as exc:
            raise self._ipset_error(exc.errno, f"reading ipset {name}") from exc
        for body in bodies:
            typename = parse_attrs(body, 4).get(ipsetnl.ATTR_TYPENAME)
            if typename is not None:
                set_type = bytes(typename).split(b"\0", 1)[0].decode()
                self._set_types[name] = set_type
                return set_type
        raise NotFound(f"ipset {name} not found")

    def _set_type_cached(self, name: str) -> str:
        # A member's encoding depends on the set's type. It is remembered
        # rather than read before every add/delete (half the round trips);
        # a failed add/delete forgets it, so a set re-created by hand with
        # another type costs one error, then is read again.
        return self._set_types.get(name) or self._set_type(name)

    def ensure_ipset(self, spec: IPSetSpec) -> None:
        # The spec's comment is for people reading our code: the kernel has no
        # per-set comment (only per-member ones), so it is not stored.
        try:
            existing = self._set_type(spec.name)
        except NotFound:
            existing = None
        if existing is not None:
            if existing != spec.set_type:
                raise KernelError(f"ipset {spec.name} exists with type {existing}, not {spec.set_type}")
            return
        bitmap = spec.set_type.startswith("bitmap:")
        if bitmap:
            family = socket.AF_UNSPEC  # bitmap:port holds no addresses
        else:
            family = socket.AF_INET6 if spec.family == "inet6" else socket.AF_INET
        payload = ipsetnl.create(spec.name, spec.set_type, family, self._ipset_revision(spec.set_type, family),
                                 spec.port_range if bitmap else None)
        self._ipset_command(ipsetnl.CMD_CREATE, payload, f"creating ipset {spec.name}")
        self._set_types[spec.name] = spec.set_type

    def list_ipset(self, name: str) -> set[IPSetEntry]:
        try:
            bodies = self._socket().dump(ipsetnl.msg_type(ipsetnl.CMD_LIST), ipsetnl.list_request(name))
        except OSError as exc:
            raise self._ipset_error(exc.errno, f"listing ipset {name}") from exc
        set_type, members = ipsetnl.parse_list(bodies)
        if set_type is not None:
            self._set_types[name] = set_type
        return members

    def add_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._one(AddIPSetEntry(name, entry))

    def delete_ipset_entry(self, name: str, entry: IPSetEntry) -> None:
        self._one(DeleteIPSetEntry(name, entry))

    def flush_ipset(self, name: str) -> None:
        self._set_type(name)  # flushing a missing set is not an error otherwise
        self._ipset_command(ipsetnl.CMD_FLUSH, ipsetnl.list_request(name), f"flushing ipset {name}")

    def destroy_ipset(self, name: str) -> None:
        self._set_types.pop(name, None)
        # Without NLM_F_EXCL the kernel takes a missing set as destroyed
        # (IPSET_FLAG_EXIST); the interface wants NotFound.
        self._ipset_command(ipsetnl.CMD_DESTROY, ipsetnl.list_request(name), f"destroying ipset {name}", NLM_F_EXCL)

