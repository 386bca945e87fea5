"""Byte units. In code everything is bytes and seconds; GiB and MiB only where people read them."""

KIB = 1024
MIB = 1024**2
GIB = 1024**3
