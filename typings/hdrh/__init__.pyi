# Stubs for hdrhistogram (`hdrh`), which ships no type information: the part harness uses.
