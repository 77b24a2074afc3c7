"""Content hashes that key stored results (with the config hash)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import List, Union

import torch

from ..errors import VideoReadError
from .decode import check_file, special_file
from .framestore import VideoFrames
from .images import list_images

_BLOCK = 1 << 20


def _update_file(digest: "hashlib._Hash", path: Path) -> None:
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_BLOCK), b""):
            digest.update(block)


def content_hash(source: Union[str, os.PathLike, torch.Tensor]) -> str:
    """SHA-256 hex digest (64 characters) of a clip's content.

    * file: the file's bytes (identical to ``sha256sum FILE``);
    * folder of images: for each image in natural order, its name (its bytes as the file
      system stores them, :func:`os.fsencode`) and its bytes;
    * streamed frames (:class:`~geocon_torch.io.framestore.VideoFrames`): their file's bytes;
    * tensor: its dtype, shape and raw bytes (row-major), so the same pixels in another
      layout or dtype hash differently. CUDA tensors are copied to the CPU to be hashed.

    Args:
        source: a video / image file path, a folder of images, a VideoFrames store or a
            tensor (any shape, dtype and device).
    Returns:
        The 64-character lowercase hex SHA-256 digest.
    Raises:
        VideoReadError: a missing or empty path, a folder without images, or another type.
    """
    digest = hashlib.sha256()
    if isinstance(source, VideoFrames):  # a streamed clip's frames: its file
        source = source.path
    if isinstance(source, torch.Tensor):
        return tensor_content_hashes(source.unsqueeze(0))[0]
    if not isinstance(source, (str, os.PathLike)):
        raise VideoReadError(f"content_hash takes a path or a tensor, got {type(source).__name__}")
    path = check_file(Path(source))
    if path.is_dir():
        for image in list_images(path):
            digest.update(os.fsencode(image.name) + b"\0")  # any name, UTF-8 or not
            _update_file(digest, image)
        return digest.hexdigest()
    _update_file(digest, path)
    return digest.hexdigest()


def input_digest(path: Union[str, Path]) -> str:
    """SHA-256 hex digest of a side input (a masks / poses file or folder): a file's bytes; a
    folder's files below it in sorted relative-path order, each name (POSIX) and its bytes;
    ``"missing"`` when the path does not exist and, for a device, a named pipe or a socket
    (:func:`~geocon_torch.io.decode.special_file`: never opened, reading it may never end), the
    digest of its absolute path (scoring then names the problem)."""
    p = Path(path)
    digest = hashlib.sha256()
    if special_file(p) is not None:  # its own key: each such row names its own path
        digest.update(b"special|" + os.fsencode(p.absolute()))
    elif p.is_file():
        _update_file(digest, p)
    elif p.is_dir():
        for f in sorted((f for f in p.rglob("*") if f.is_file()),
                        key=lambda f: f.relative_to(p).as_posix()):
            digest.update(os.fsencode(f.relative_to(p).as_posix()) + b"\0")
            _update_file(digest, f)
    else:
        return "missing"
    return digest.hexdigest()


def tensor_content_hashes(batch: torch.Tensor) -> List[str]:
    """:func:`content_hash` of each clip ``batch[k]`` of a (B, ...) tensor, with one host copy
    of the whole batch (not one per clip: on CUDA each copy is a sync)."""
    t = batch.detach().contiguous().cpu()
    header = f"tensor|{str(t.dtype)}|{tuple(t.shape[1:])}|".encode()
    raw = t.reshape(t.shape[0], -1).view(torch.uint8).numpy()
    out = []
    for k in range(t.shape[0]):
        digest = hashlib.sha256(header)
        digest.update(raw[k].tobytes())
        out.append(digest.hexdigest())
    return out
