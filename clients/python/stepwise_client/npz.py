"""Reader for the `padded` batch format: an uncompressed ZIP of `.npy` members.

The server writes every member stored (no compression) with its data on a 64-byte boundary of the
response body, so each array can be a view of the received bytes. With NumPy the arrays are
`numpy.frombuffer` views (no copy); without it (or with `STEPWISE_NO_NUMPY=1`) they are small
`NpyArray` objects backed by `array.array`.
"""

from __future__ import annotations

import array
import ast
import os
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from .errors import StepwiseFormatError

try:  # NumPy is optional: the client must work on a bare Python.
    if os.environ.get("STEPWISE_NO_NUMPY", "") not in ("", "0"):
        raise ImportError("STEPWISE_NO_NUMPY is set")
    import numpy as np
except ImportError:
    np = None  # type: ignore[assignment]

#: True when arrays are NumPy views of the response body; False when they are `NpyArray`s.
HAVE_NUMPY: bool = np is not None

_LITTLE_ENDIAN = sys.byteorder == "little"


def _typecode(kind: str, itemsize: int) -> str:
    """The `array.array` typecode of a given kind and width on this machine (C widths vary)."""
    candidates = {"i": "ilq", "u": "BHILQ", "f": "fd"}[kind]
    for code in candidates:
        if array.array(code).itemsize == itemsize:
            return code
    raise StepwiseFormatError(f"no array typecode for {kind}{itemsize} on this machine")


# Numeric dtypes of the padded format: descr -> (array typecode, itemsize).
_NUMERIC: dict[str, tuple[str, int]] = {
    "<i4": (_typecode("i", 4), 4),
    "|u1": ("B", 1),
    "<f4": (_typecode("f", 4), 4),
    "<i8": (_typecode("i", 8), 8),
    "<f8": (_typecode("f", 8), 8),
}
# NumPy may spell a one-byte dtype with either byte-order mark.
_ALIASES = {"<u1": "|u1", "=u1": "|u1", "u1": "|u1"}


# ---- ZIP ---------------------------------------------------------------------------------------

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_ZIP64_EXTRA = 0x0001


class ZipMember(NamedTuple):
    """One stored member: its name and where its bytes lie in the body."""

    name: str
    offset: int
    size: int


def _u16(buf: memoryview, at: int) -> int:
    return struct.unpack_from("<H", buf, at)[0]


def _u32(buf: memoryview, at: int) -> int:
    return struct.unpack_from("<I", buf, at)[0]


def _u64(buf: memoryview, at: int) -> int:
    return struct.unpack_from("<Q", buf, at)[0]


def _need(buf: memoryview, at: int, size: int, what: str) -> None:
    if at < 0 or at + size > len(buf):
        raise StepwiseFormatError(f"zip: {what} runs past the end of the body (truncated response?)")


def _find_eocd(buf: memoryview) -> int:
    # The end record is the last 22 bytes plus a comment of up to 65535 bytes.
    lowest = max(0, len(buf) - 22 - 0xFFFF)
    tail = bytes(buf[lowest:])
    at = tail.rfind(_EOCD)
    while at >= 0:
        if at + 22 <= len(tail) and at + 22 + _u16(memoryview(tail), at + 20) == len(tail):
            return lowest + at
        at = tail.rfind(_EOCD, 0, at)
    raise StepwiseFormatError("zip: no end-of-central-directory record (not a zip, or truncated)")


def read_zip_directory(body: bytes | bytearray | memoryview) -> list[ZipMember]:
    """Lists the stored members of a ZIP held in memory, with the offset of each member's data.

    Only stored (uncompressed, unencrypted) members are accepted: the padded format promises them,
    and a compressed member could not be a view of the body anyway. ZIP64 records are understood.
    """
    buf = memoryview(body).cast("B")
    eocd = _find_eocd(buf)
    count = _u16(buf, eocd + 10)
    cd_size = _u32(buf, eocd + 12)
    cd_offset = _u32(buf, eocd + 16)
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        locator = eocd - 20
        _need(buf, locator, 20, "zip64 locator")
        if bytes(buf[locator : locator + 4]) != _EOCD64_LOCATOR:
            raise StepwiseFormatError("zip: zip64 sizes without a zip64 end record")
        end64 = _u64(buf, locator + 8)
        _need(buf, end64, 56, "zip64 end record")
        if bytes(buf[end64 : end64 + 4]) != _EOCD64:
            raise StepwiseFormatError("zip: bad zip64 end record")
        count = _u64(buf, end64 + 32)
        cd_size = _u64(buf, end64 + 40)
        cd_offset = _u64(buf, end64 + 48)
    _need(buf, cd_offset, cd_size, "central directory")

    members: list[ZipMember] = []
    at = cd_offset
    for _ in range(count):
        _need(buf, at, 46, "central directory entry")
        if bytes(buf[at : at + 4]) != _CENTRAL:
            raise StepwiseFormatError(f"zip: bad central directory entry at byte {at}")
        flags = _u16(buf, at + 8)
        method = _u16(buf, at + 10)
        csize = _u32(buf, at + 20)
        usize = _u32(buf, at + 24)
        name_len, extra_len, comment_len = _u16(buf, at + 28), _u16(buf, at + 30), _u16(buf, at + 32)
        local = _u32(buf, at + 42)
        _need(buf, at + 46, name_len + extra_len + comment_len, "central directory entry")
        name = bytes(buf[at + 46 : at + 46 + name_len]).decode("utf-8" if flags & 0x800 else "cp437")
        if method != 0:
            raise StepwiseFormatError(
                f"zip member {name!r} is compressed (method {method}); the padded format is stored "
                "(uncompressed) only, so its arrays can be views of the response"
            )
        if flags & 0x1:
            raise StepwiseFormatError(f"zip member {name!r} is encrypted")
        # ZIP64 extra field: the 64-bit values appear only for fields saturated at 0xFFFFFFFF.
        extra = at + 46 + name_len
        end = extra + extra_len
        while extra + 4 <= end:
            tag, size = _u16(buf, extra), _u16(buf, extra + 2)
            if tag == _ZIP64_EXTRA:
                field = extra + 4
                if usize == 0xFFFFFFFF:
                    usize, field = _u64(buf, field), field + 8
                if csize == 0xFFFFFFFF:
                    csize, field = _u64(buf, field), field + 8
                if local == 0xFFFFFFFF:
                    local = _u64(buf, field)
            extra += 4 + size
        if csize != usize:
            raise StepwiseFormatError(f"zip member {name!r}: stored sizes disagree ({csize} != {usize})")
        # The data follows the local header, whose name/extra lengths may differ from the central
        # directory's (writers pad the local extra field to align the data).
        _need(buf, local, 30, f"local header of {name!r}")
        if bytes(buf[local : local + 4]) != _LOCAL:
            raise StepwiseFormatError(f"zip: bad local header for member {name!r}")
        data = local + 30 + _u16(buf, local + 26) + _u16(buf, local + 28)
        _need(buf, data, usize, f"data of {name!r}")
        members.append(ZipMember(name, data, usize))
        at += 46 + name_len + extra_len + comment_len
    return members


# ---- .npy --------------------------------------------------------------------------------------

_NPY_MAGIC = b"\x93NUMPY"


class NpyHeader(NamedTuple):
    """The parsed header of one `.npy` member; `data_offset` is absolute within the body."""

    descr: str
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int
    count: int


def read_npy_header(buf: memoryview, offset: int, size: int, name: str = "") -> NpyHeader:
    """Parses a `.npy` v1/v2/v3 header that starts at `offset` of `buf` (member of `size` bytes)."""
    where = f"npy member {name!r}" if name else "npy"
    if size < 10 or bytes(buf[offset : offset + 6]) != _NPY_MAGIC:
        raise StepwiseFormatError(f"{where}: not a .npy file (bad magic)")
    major = buf[offset + 6]
    if major == 1:
        header_len, start = _u16(buf, offset + 8), offset + 10
    elif major in (2, 3):
        if size < 12:
            raise StepwiseFormatError(f"{where}: truncated header")
        header_len, start = _u32(buf, offset + 8), offset + 12
    else:
        raise StepwiseFormatError(f"{where}: unsupported .npy version {major}")
    if start + header_len > offset + size:
        raise StepwiseFormatError(f"{where}: header runs past the member")
    text = bytes(buf[start : start + header_len]).decode("utf-8" if major == 3 else "latin1")
    try:
        header = ast.literal_eval(text)
    except (ValueError, SyntaxError) as error:
        raise StepwiseFormatError(f"{where}: unreadable header {text.strip()!r}") from error
    if not isinstance(header, dict) or not {"descr", "fortran_order", "shape"} <= header.keys():
        raise StepwiseFormatError(f"{where}: header lacks descr/fortran_order/shape: {text.strip()!r}")
    descr, shape = header["descr"], header["shape"]
    if not isinstance(descr, str):
        raise StepwiseFormatError(f"{where}: structured dtype {descr!r} is not supported")
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise StepwiseFormatError(f"{where}: bad shape {shape!r}")
    descr = _ALIASES.get(descr, descr)
    count = 1
    for d in shape:
        count *= d
    data_offset = start + header_len
    itemsize = _itemsize(descr, where)
    if data_offset + count * itemsize > offset + size:
        raise StepwiseFormatError(
            f"{where}: {count} x {descr} does not fit in the member ({size} bytes)"
        )
    return NpyHeader(descr, bool(header["fortran_order"]), shape, data_offset, count)


def _itemsize(descr: str, where: str) -> int:
    if descr in _NUMERIC:
        return _NUMERIC[descr][1]
    if descr.startswith("<U") and descr[2:].isdigit():
        return 4 * int(descr[2:])
    raise StepwiseFormatError(
        f"{where}: unsupported dtype {descr!r} (expected <i4, |u1, <f4, <i8, <f8 or <U<n>)"
    )


# ---- arrays without NumPy ----------------------------------------------------------------------


class NpyArray:
    """A minimal n-d array for when NumPy is absent: `shape`, `dtype` and flat `values`.

    `values` is an `array.array` in native byte order for numeric dtypes, or a list of `str` for
    `<U` dtypes. Indexing by an integer gives a row (an `NpyArray` of one dimension less, or a
    scalar for 1-d arrays); `tolist()` nests the values by shape, like `numpy.ndarray.tolist()`.
    """

    __slots__ = ("shape", "dtype", "values", "_start")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: str,
        values: array.array | list[str],
        _start: int = 0,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.values = values
        self._start = _start  # rows share the parent's values; this is where this one begins

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __getitem__(self, index: int) -> Any:
        if not self.shape:
            raise IndexError("a 0-d array has no rows")
        n = self.shape[0]
        if not isinstance(index, int):
            raise TypeError("NpyArray supports integer indexes only (install NumPy for more)")
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for axis 0 of size {n}")
        row = self.size // n if n else 0
        if len(self.shape) == 1:
            return self.values[self._start + index]
        return NpyArray(self.shape[1:], self.dtype, self.values, self._start + index * row)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def flat(self) -> Sequence[Any]:
        """The values of this array (or row) in C order, as a slice of the backing storage."""
        return self.values[self._start : self._start + self.size]

    def tolist(self) -> Any:
        """The values as nested Python lists (a scalar for a 0-d array)."""
        flat = list(self.flat())
        if not self.shape:
            return flat[0]

        def nest(items: list[Any], dims: tuple[int, ...]) -> list[Any]:
            if len(dims) == 1:
                return items
            step = len(items) // dims[0] if dims[0] else 0
            return [nest(items[i * step : (i + 1) * step], dims[1:]) for i in range(dims[0])]

        return nest(flat, self.shape)

    def __repr__(self) -> str:
        return f"NpyArray(shape={self.shape}, dtype={self.dtype!r})"


def _fallback_array(buf: memoryview, header: NpyHeader, where: str) -> NpyArray:
    if header.fortran_order and len(header.shape) > 1:
        raise StepwiseFormatError(f"{where}: fortran-order arrays need NumPy")
    descr, start = header.descr, header.data_offset
    if descr in _NUMERIC:
        code, itemsize = _NUMERIC[descr]
        values = array.array(code)
        values.frombytes(buf[start : start + header.count * itemsize])
        if not _LITTLE_ENDIAN and itemsize > 1:
            values.byteswap()
        return NpyArray(header.shape, descr, values)
    width = 4 * int(descr[2:])
    raw = bytes(buf[start : start + header.count * width])
    # NumPy stores fixed-width UTF-32 and strips trailing NULs when reading: do the same.
    strings = [
        raw[i * width : (i + 1) * width].decode("utf-32-le").rstrip("\x00") for i in range(header.count)
    ]
    return NpyArray(header.shape, descr, strings)


def _numpy_array(body: Any, header: NpyHeader) -> Any:
    dtype = np.dtype(header.descr)
    if header.count == 0:
        return np.empty(header.shape, dtype)
    flat = np.frombuffer(body, dtype=dtype, count=header.count, offset=header.data_offset)
    return flat.reshape(header.shape, order="F" if header.fortran_order else "C")


def read_padded(body: bytes | bytearray, *, use_numpy: bool | None = None) -> dict[str, Any]:
    """Reads every `.npy` member of a padded batch; keys are member names without `.npy`.

    With NumPy the arrays are views of `body` (no copy; writable when `body` is a `bytearray`).
    """
    numpy = HAVE_NUMPY if use_numpy is None else use_numpy
    if numpy and not HAVE_NUMPY:
        raise StepwiseFormatError("NumPy is not available")
    buf = memoryview(body).cast("B")
    arrays: dict[str, Any] = {}
    for member in read_zip_directory(buf):
        key = member.name[:-4] if member.name.endswith(".npy") else member.name
        header = read_npy_header(buf, member.offset, member.size, member.name)
        if numpy:
            arrays[key] = _numpy_array(body, header)
        else:
            arrays[key] = _fallback_array(buf, header, f"npy member {member.name!r}")
    return arrays
