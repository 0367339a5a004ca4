"""Where a short link may send its readers: no loopback, intranet or cloud-metadata host.

A short link is followed by a browser, or by a server that fetches it (a link preview, a
crawler, a webhook): a redirect from a public service to ``169.254.169.254`` or to
``localhost`` is a known way into what the fetcher can reach and its user cannot. So a target
whose host *is* such an address, or a name fixed to one, is refused:

* always: a cloud metadata service, the unspecified address (``0.0.0.0``, ``::``), multicast
  and reserved ranges, and IPv6 zone ids (``%eth0`` names an interface of the machine that
  follows the link, and browsers do not agree on it);
* unless intranet targets are allowed: loopback (``localhost`` too), link-local, private and
  other ranges that are not globally reachable (shared, documentation, benchmarking).

Private ranges fall under the option rather than being allowed by default: to a fetcher
inside a data centre, ``10.0.0.5`` is as much "inside" as ``127.0.0.1`` is.

Names are not resolved (a name's address can change after the check, and a resolver may be
slow or absent), so only the host as written is judged; IPv4 written as IPv6
(``[::ffff:127.0.0.1]``, NAT64 ``[64:ff9b::7f00:1]``, 6to4) is judged by its IPv4 address.
"""

from __future__ import annotations

import ipaddress

__all__ = ["INTRANET_OPTION", "target_host_problem"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: how the refusal names the option that allows intranet targets
INTRANET_OPTION = "allow_intranet=True"

_METADATA_ADDRESSES = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, Azure, GCP, OpenStack, Oracle, ...
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
}
_METADATA_NAMES = {"metadata.google.internal", "metadata.goog", "metadata"}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def target_host_problem(host: str, *, allow_intranet: bool = False) -> str | None:
    """Why a link must not go to *host* (as :func:`urllib.parse.urlsplit` gives it: lower
    case, no brackets), or ``None``; *host* is otherwise valid (a name or an IP address)."""
    name = host.removesuffix(".")
    if "%" in name:
        return (
            f"host [{host}] has an IPv6 zone id ('%{host.partition('%')[2]}'), which names a "
            "network interface of the machine that follows the link"
        )
    try:
        address: IPAddress = ipaddress.ip_address(name)
    except ValueError:
        return _name_problem(name, host, allow_intranet)
    return _address_problem(address, host, allow_intranet)


def _name_problem(name: str, host: str, allow_intranet: bool) -> str | None:
    if name in _METADATA_NAMES:
        return f"host {host!r} is a cloud metadata service"
    if not allow_intranet and (name == "localhost" or name.endswith(".localhost")):
        return (
            f"host {host!r} is loopback (the machine that follows the link); "
            f"intranet targets need {INTRANET_OPTION}"
        )
    return None


def _address_problem(address: IPAddress, host: str, allow_intranet: bool) -> str | None:
    shown = f"host {host!r}" if address.version == 4 else f"host [{host}]"
    inner = _embedded_ipv4(address)
    if inner is not None:
        shown += f" (the IPv4 address {inner})"
        address = inner
    if address in _METADATA_ADDRESSES:
        return f"{shown} is a cloud metadata service"
    if address.is_unspecified:
        return f"{shown} is the unspecified address, which reaches the machine that follows it"
    if address.is_multicast:
        return f"{shown} is a multicast address"
    if address.is_reserved and not address.is_loopback:  # ::1 is in IPv6's reserved ::/8
        return f"{shown} is in a reserved range"
    if allow_intranet:
        return None
    kind = (
        "loopback (the machine that follows the link)"
        if address.is_loopback
        else "link-local"
        if address.is_link_local
        else "private"
        if address.is_private
        else "not globally reachable"
        if not address.is_global
        else None
    )
    if kind is None:
        return None
    return f"{shown} is {kind}; intranet targets need {INTRANET_OPTION}"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4), or ``None``."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour
