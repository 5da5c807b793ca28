//! WAN emulator driver: network namespaces, veth, NFQUEUE loop.
