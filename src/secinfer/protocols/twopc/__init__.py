"""Shared two-party layer: the public plan of typed steps (``plan``), the linear-engine
interface (``engine``) and the server/client session helpers (``session``). A two-party
protocol package (crisp, safhire, certified, ...) imports this layer, never another
protocol's package. How a new protocol starts from it: README.md in this directory."""
