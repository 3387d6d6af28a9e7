#!/usr/bin/python3
"""Image fixtures for cpudl's decoders and resizer (tests/data/image_test.cpp): small images in
the PNG and JPEG variants people save, each with the values another tool decodes from it, and
PyTorch's antialiased bilinear resize of two of them.

  /usr/bin/python3 scripts/gen-image-fixtures.py    (Debian python3-pil, python3-numpy, python3-torch)

Writes tests/golden/images/: NAME.png|jpg and NAME.npy (float32 [C, H, W] in [0, 1], as PIL
decodes the file: grey files as 1 channel, colour as RGB, alpha dropped; 16-bit as value / 65535),
and resize_*.npy (torch.nn.functional.interpolate, mode bilinear, antialias, align_corners False).
"""
import os

import numpy as np
import torch
from PIL import Image

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "images")


def pattern(h, w, c, seed):
    """Smooth gradients plus noise: every row filter and DCT block sees varied data."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    planes = [(x * (7 + 3 * k) + y * (11 - 2 * k)) % 256 for k in range(c)]
    v = np.stack(planes, -1).astype(np.float64) * 0.8 + rng.integers(0, 50, (h, w, c))
    return np.clip(v, 0, 255).astype(np.uint8)


def chw(a):
    a = np.asarray(a, dtype=np.float64)
    return (a[None] if a.ndim == 2 else a.transpose(2, 0, 1)) / 255.0


def decoded(path):
    """What PIL decodes, in cpudl's convention."""
    im = Image.open(path)
    if im.mode in ("I", "I;16"):
        return np.asarray(im, dtype=np.float64)[None] / 65535.0
    # a palette file is colour to libpng (its colour type says so), whatever its entries
    return chw(im.convert("L" if im.mode in ("1", "L", "LA") else "RGB"))


def main():
    os.makedirs(OUT, exist_ok=True)
    rgb = pattern(11, 13, 3, 1)
    grey = pattern(11, 13, 1, 2)[:, :, 0]
    alpha = pattern(11, 13, 1, 3)[:, :, 0]
    Image.fromarray(grey).save(os.path.join(OUT, "grey8.png"))
    Image.fromarray(rgb).save(os.path.join(OUT, "rgb8.png"), optimize=True)
    Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(os.path.join(OUT, "rgba8.png"))
    Image.fromarray(np.dstack([grey, alpha]), "LA").save(os.path.join(OUT, "grey_alpha8.png"))
    Image.fromarray(grey > 127).save(os.path.join(OUT, "grey1.png"))
    Image.fromarray(rgb).quantize(colors=16).save(os.path.join(OUT, "palette.png"))
    grey16 = (pattern(11, 13, 1, 4)[:, :, 0].astype(np.uint16) * 257 + np.arange(13, dtype=np.uint16)) % 65536
    Image.fromarray(grey16.astype(np.uint16)).save(os.path.join(OUT, "grey16.png"))
    Image.fromarray(rgb).save(os.path.join(OUT, "rgb.jpg"), quality=92)
    Image.fromarray(grey).save(os.path.join(OUT, "grey.jpg"), quality=92)
    Image.fromarray(rgb).save(os.path.join(OUT, "progressive.jpg"), quality=90, progressive=True)
    for name in ["grey8.png", "rgb8.png", "rgba8.png", "grey_alpha8.png", "grey1.png", "palette.png", "grey16.png",
                 "rgb.jpg", "grey.jpg", "progressive.jpg"]:
        np.save(os.path.join(OUT, os.path.splitext(name)[0] + ".npy"),
                decoded(os.path.join(OUT, name)).astype(np.float32))
    # PyTorch's antialiased bilinear: a larger grey image down to 28 x 28, and the colour one up.
    big = pattern(61, 47, 1, 5)[:, :, 0]
    Image.fromarray(big).save(os.path.join(OUT, "big_grey.png"))
    np.save(os.path.join(OUT, "big_grey.npy"), chw(big).astype(np.float32))
    for name, src, size in [("resize_down", chw(big), (28, 28)), ("resize_up", chw(rgb), (24, 29))]:
        t = torch.from_numpy(src.astype(np.float32))[None]
        out = torch.nn.functional.interpolate(t, size=size, mode="bilinear", antialias=True, align_corners=False)
        np.save(os.path.join(OUT, name + ".npy"), out[0].numpy().astype(np.float32))


if __name__ == "__main__":
    main()
