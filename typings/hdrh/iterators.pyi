# Stubs for hdrhistogram's `hdrh.iterators` (no type information shipped): what harness reads.

class HdrIterationValue:
    value_iterated_to: int
    count_at_value_iterated_to: int
