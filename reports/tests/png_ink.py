#!/usr/bin/python3
"""png_ink.py REPORT.png BLANK.png: the report's screenshot must show content (>= 3% of pixels
not near-white, and some of them the plots' blue or the failures' red), the blank control none.
A minimal decoder of 8-bit, non-interlaced RGB(A) PNG, the form Chromium writes."""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, f"{path}: unsupported PNG"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    prev, out, i = bytearray(stride), [], 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.extend(tuple(line[x:x + 3]) for x in range(0, stride, bpp))
        prev = line
    return out


def measure(path):
    px = pixels(path)
    ink = sum(1 for r, g, b in px if min(r, g, b) < 230) / len(px)
    blue = sum(1 for r, g, b in px if b > 140 and r < 110)
    red = sum(1 for r, g, b in px if r > 150 and g < 90 and b < 90)
    return ink, blue, red


ink, blue, red = measure(sys.argv[1])
blank_ink, _, _ = measure(sys.argv[2])
print(f"report: {ink:.1%} ink, {blue} blue and {red} red pixels; blank control: {blank_ink:.1%} ink")
ok = ink >= 0.03 and blue + red > 200 and blank_ink < 0.001
print("html renders: " + ("ok" if ok else "EMPTY or wrong"))
sys.exit(0 if ok else 1)
