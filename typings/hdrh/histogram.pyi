# Stubs for hdrhistogram's `hdrh.histogram` (the package ships no type information): only the
# part harness uses (harness.record.hist and the histogram readers), checked against 0.10.
from collections.abc import Iterator, MutableSequence, Sequence

from hdrh.iterators import HdrIterationValue

class HdrHistogram:
    # read by harness.record.hist.record_many to record a batch the way record_value does
    unit_magnitude: int
    sub_bucket_half_count_magnitude: int
    sub_bucket_half_count: int
    sub_bucket_mask: int
    counts_len: int
    counts: MutableSequence[int]  # a ctypes array of the bucket counts
    total_count: int
    min_value: int
    max_value: int
    def __init__(
        self,
        lowest_trackable_value: int,
        highest_trackable_value: int,
        significant_figures: int,
        word_size: int = 8,
        b64_wrap: bool = True,
        hdr_payload: object = None,
    ) -> None: ...
    def get_total_count(self) -> int: ...
    def get_value_at_percentile(self, percentile: float) -> int: ...
    def get_percentile_to_value_dict(
        self, percentile_list: Sequence[float]
    ) -> dict[float, int]: ...
    def get_max_value(self) -> int: ...
    def get_mean_value(self) -> float: ...
    def get_recorded_iterator(self) -> Iterator[HdrIterationValue]: ...
    def encode(self) -> bytes: ...
    def add(self, other_hist: HdrHistogram) -> None: ...
    @staticmethod
    def decode(encoded_histogram: bytes, b64_wrap: bool = True) -> HdrHistogram: ...
