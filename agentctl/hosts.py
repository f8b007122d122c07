"""The hosts a tool may reach (agentctl(7), NETWORK): an agent's --net list and an MCP
server's "net", read, compared and asked by the one set of rules here.

A list is patterns, each a host and an optional port (`:443`; none: any port):

- `*`: every public host (a name, or an address that is public);
- `*.example.com`: the names below example.com (not example.com itself);
- `example.com`: that name;
- `192.0.2.7`, `[2001:db8::1]`, `10.0.0.0/8`, `[fd00::/8]`: those addresses, as written.

A name is allowed when a pattern names it and the address it resolves to (resolved
once, by the egress proxy, and connected to as resolved) is public, or is named by
an address pattern: loopback, link-local (the cloud's metadata address), private,
shared and reserved addresses are reached only when the list names them by address.
An address literal is allowed when an address pattern holds it, or `*` and it is
public. A list is within another (a child's within its parent's) when each of its
patterns is: a name below a `*.` suffix, an address in a network, any port within no
port.
"""

import ipaddress
import re

from agentctl.errors import UsageError

ALL = "*"
_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?")
_ON = ("yes", "true", "on", "1")
_OFF = ("no", "false", "off", "0", "")
# What no name reaches unless the list names it by address: besides what ipaddress
# calls not global, the shared (carrier-grade NAT) range, which it calls neither.
_SHARED = ipaddress.ip_network("100.64.0.0/10")


class Pattern:
    """One pattern of a list: `kind` all, suffix, name or net; `value` the suffix
    (with its dot), the name, or the ip_network; `port` an int or None."""
    __slots__ = ("kind", "value", "port", "text")

    def __init__(self, kind, value, port, text):
        self.kind, self.value, self.port, self.text = kind, value, port, text

    def __repr__(self):
        return f"Pattern({self.text!r})"

    def port_ok(self, port):
        return self.port is None or self.port == port

    def names(self, host):
        """Whether it names `host` (a name, lower case, no final dot), port aside."""
        if self.kind == "all":
            return True
        if self.kind == "suffix":
            return host.endswith(self.value)
        return self.kind == "name" and host == self.value

    def holds(self, address):
        """Whether it names `address` (an ip_address) by address, port aside."""
        return self.kind == "net" and address.version == self.value.version \
            and address in self.value

    def within(self, other):
        """Whether everything it allows, `other` allows."""
        if other.port is not None and self.port != other.port:
            return False
        if self.kind == "net":
            if other.kind == "all":
                return public_network(self.value)
            return other.kind == "net" and self.value.version == other.value.version \
                and self.value.subnet_of(other.value)
        if other.kind == "all":
            return True
        if self.kind == "all" or other.kind == "net":
            return False
        if other.kind == "suffix":
            return self.value.endswith(other.value)     # (a suffix's value has its dot)
        return self.kind == "name" and self.value == other.value


def pattern(text):
    """A Pattern from its text; a usage error that says what one looks like."""
    raw = text.strip()
    host, port = raw.lower(), None
    if host.startswith("["):                            # [v6] or [v6/len], then :port
        end = host.find("]")
        rest = host[end + 1:] if end > 0 else "x"
        host = host[1:end] if end > 0 else host
        if rest:
            if not rest.startswith(":"):
                raise _bad(raw)
            port = rest[1:]
    elif host.count(":") == 1:
        host, port = host.split(":")
    elif ":" in host:
        raise _bad(raw, "write an IPv6 address in brackets: [2001:db8::1]:443")
    if port is not None:
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise _bad(raw, "a port is a number from 1 to 65535")
        port = int(port)
    if host == ALL:
        return Pattern("all", None, port, raw)
    address = _network(host)
    if address is not None:
        return Pattern("net", address, port, raw)
    if host.startswith("*."):
        if not _NAME.fullmatch(host[2:]) or "*" in host[2:]:
            raise _bad(raw)
        return Pattern("suffix", host[1:].rstrip("."), port, raw)
    if not _NAME.fullmatch(host) or host.replace(".", "").isdigit():
        raise _bad(raw)
    return Pattern("name", host.rstrip("."), port, raw)


def _network(host):
    try:
        return ipaddress.ip_network(host, strict=False) if "/" in host else \
            ipaddress.ip_network(ipaddress.ip_address(host))
    except ValueError:
        return None


def _bad(text, why="want a host name, *.suffix, *, an address or a network, each with "
                   "an optional :port"):
    shown = text if text.isprintable() and len(text) <= 80 else repr(text[:80])
    return UsageError(f"bad net: {shown!r} ({why})")


def parse(text):
    """A list from text, patterns separated by commas or lines: a list of the patterns'
    texts, each checked (a usage error names a bad one); yes/on is `*`, no/off none
    ([])."""
    if text.strip().lower() in _ON:
        return [ALL]
    if text.strip().lower() in _OFF:
        return []
    items = [t for t in re.split(r"[,\n]", text) if t.strip()]
    return [pattern(t).text for t in items]


def read(stored):
    """The Patterns of a list as stored (one a line; None: none) or given (a list)."""
    if not stored:
        return []
    return [pattern(t) for t in (stored.split("\n") if isinstance(stored, str) else stored)]


def within(new, old):
    """Whether list `new` allows at most what `old` does (each as stored)."""
    held = read(old)
    return all(any(p.within(o) for o in held) for p in read(new))


def public(address):
    """Whether a name may lead to `address` (an ip_address) without the list naming it."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and address not in _SHARED and not address.is_multicast


def public_network(network):
    return public(network.network_address) and public(network.broadcast_address) \
        and not network.overlaps(_SHARED)


def address_of(host):
    """`host` as an ip_address when it is written as one, else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def named(patterns, host, port):
    """Whether a pattern names `host` (a name or an address as written) on `port`."""
    address = address_of(host)
    if address is not None:
        return any(p.port_ok(port) and (p.holds(address) or p.kind == "all")
                   for p in patterns)
    host = host.lower().rstrip(".")
    return any(p.port_ok(port) and p.names(host) for p in patterns)


def reachable(patterns, address, port):
    """Whether a connection to `address` (an ip_address) on `port` may be made for a
    host the list names: it is public, or the list names it by address."""
    held = address.ipv4_mapped if address.version == 6 and address.ipv4_mapped else address
    return public(held) or any(p.port_ok(port) and (p.holds(address) or p.holds(held))
                               for p in patterns)


def describe(address):
    """What kind of address a refused one is, for the refusal's line."""
    if address.version == 6 and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (the cloud's metadata address is one)"
    if address.is_private or address in _SHARED:
        return "private"
    return "not public"
