"""The stage records' file checksum, read a buffer at a time, against one CRC-32 of the whole file."""

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack._stages import file_checksum


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=200), chunk=st.integers(1, 17))
def test_checksum_equals_one_crc_of_the_whole_file(tmp_path_factory, data, chunk):
    # a file across many reads (1-17 byte buffers), or none when empty: the same size and CRC as one pass
    p = tmp_path_factory.mktemp("c") / "f"
    p.write_bytes(data)
    assert file_checksum(p, chunk=chunk) == f"{len(data)}:{zlib.crc32(data):08x}"
