"""Decode integrity: what a clip lost while it was read, as the result's ``io`` block.

A file can decode only in part (corrupt packets, a cut tail, dropped frames). That is never
silent: :func:`decode_report` turns the reader's ``Clip.meta`` into the ``io`` block recorded in
every result, and :func:`decode_verdict` says whether the clip may be scored:

* ``lost_frames`` = the most frames any evidence says are missing: frames the container
  announced but that did not decode (after a complete decode; without an announced count, as in
  Matroska / WebM, the count the stream's duration implies, ``duration_frames``), and frames
  missing between timestamps (gaps longer than 1.5 frame durations) of a constant-frame-rate
  stream, or numbers missing in an image sequence's file names (``frame_0004.png`` between
  ``frame_0003.png`` and ``frame_0005.png``);
* a variable-frame-rate stream (``variable_frame_rate``: a gif / animated WebP / APNG whose
  frame durations vary, or a stream whose long steps are common, off the frame grid or a run of
  five or more equal ones, a rate change, see :func:`geocon_torch.io.decode.variable_rate`)
  loses no frame by its timestamps: it is scored, with a ``warnings`` entry that says so;
* the container's count is compared after the preroll frames an edit list discards
  (``preroll_frames``, a stream-copy trim), and a shortfall with no sign of a cut is the
  container's count mismatch (``container_count_mismatch``, a warning), not lost frames;
* a file known to be cut where no count shows it (``truncation``: a GIF without its trailer),
  a container that records no length (``length_known`` False: MPEG-TS, raw streams) and a file
  with several video streams (``video_stream``, ``video_streams``, ``video_stream_size``) are
  scored with a ``warnings`` entry;
* ``lost_fraction`` = lost / (decoded + lost);
* more than ``io.max_lost_fraction`` (default 0.1) lost -> the clip is an ``error`` with the
  reason; any loss or decode error below that -> scored, with a ``warnings`` entry;
* frames decoded with concealed errors (``concealed_frames``: damaged data the decoder filled
  in, FFmpeg's corrupt-frame flag) are kept and scored, with a ``warnings`` entry;
* a frame size that changes mid-stream (``size_changes``, ``first_size_change``) is scored with
  a ``warnings`` entry: later frames are resized to the first frame's size;
* a source with transparent pixels (``transparent_frames``, ``transparent_fraction``: an alpha
  channel, a GIF's transparent index) is composited over black by every reader and scored with a
  ``warnings`` entry;
* a video file records ``color`` (``{"pix_fmt", "bits", "transfer", "primaries", "matrix",
  "range"}``: its decoded pixel format, bit depth and FFmpeg's names of its colour tags), so an
  SDR and an HDR row can be told apart; every file is read as SDR code values (8-bit RGB, no
  tone mapping), and a PQ / HLG / linear-light transfer is scored with a ``warnings`` entry
  that says so (its frozen threshold is scaled: :func:`geocon_torch.io.sampling.frozen_max_mad`).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from .lens import lens_warning


def decode_report(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``io`` block of a result from a clip's ``meta`` (see :mod:`geocon_torch.io.reader`).

    Keys: ``source`` (video / images / image / tensor), ``announced_frames`` (the container's
    count, None when unknown), ``decoded_frames``, ``lost_frames``, ``lost_fraction``,
    ``timestamp_gaps``, ``decode_errors`` (count) and ``first_errors`` (up to 5 messages),
    ``truncated``, ``variable_frame_rate`` (the frame durations vary: no frame is inferred
    lost from the timestamps), ``duration_frames`` (the count the stream's duration implies
    when ``announced_frames`` is None; None when unknown), ``concealed_frames`` (frames decoded
    with concealed errors), ``size_changes`` (frames whose size differs from the previous
    frame's), ``first_size_change`` (``{"frame", "from", "to"}``, sizes as "WxH", or None),
    and, only for a source with transparent pixels, ``transparent_frames`` (frames read with
    pixels that are not opaque, composited over black) and ``transparent_fraction`` (the
    fraction of the pixels read that were not opaque), and, for a video file (not an image or
    a tensor), ``color`` (:func:`geocon_torch.io.decode.frame_color` of its first frame),
    and, only for frames undistorted with ``io.lens``, ``lens`` (what was done:
    :func:`geocon_torch.io.lens.lens_record`).
    """
    announced = meta.get("container_frames")
    by_duration = None if announced else meta.get("duration_frames")
    preroll = int(meta.get("preroll_frames") or 0)
    expected = (int(announced) - preroll) if announced else by_duration
    decoded = int(meta.get("decoded_frames") or 0)
    complete = bool(meta.get("decode_complete", True))
    errors = list(meta.get("decode_errors") or [])
    counted = complete and not meta.get("container_count_mismatch")
    short = (int(expected) - decoded) if (expected and counted) else 0
    missing = int(meta.get("timestamp_missing_frames") or 0)
    lost = max(short, missing, 0)
    total = decoded + lost
    return {
        "source": meta.get("source"), "announced_frames": announced, "decoded_frames": decoded,
        "lost_frames": lost, "lost_fraction": (lost / total) if total else 0.0,
        "timestamp_gaps": int(meta.get("timestamp_gaps") or 0),
        "decode_errors": int(meta.get("num_decode_errors") or len(errors)),
        "first_errors": errors[:5], "truncated": bool(meta.get("truncated", False)),
        "variable_frame_rate": bool(meta.get("variable_frame_rate", False)),
        "duration_frames": by_duration, "concealed_frames": int(meta.get("concealed_frames") or 0),
        "size_changes": int(meta.get("size_changes") or 0),
        "first_size_change": meta.get("first_size_change"),
        **_transparency(meta), **_color(meta), **_container(meta), **_lens(meta),
    }


def _lens(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """``lens``: the clip's undistortion record (``io.lens``,
    :func:`geocon_torch.io.lens.lens_record`); {} for frames used as decoded (the block of
    every other clip stays as it was)."""
    record = meta.get("lens")
    return {"lens": dict(record)} if isinstance(record, dict) else {}


#: ``meta`` keys of unusual containers copied into the ``io`` block where present, as ints
_CONTAINER_COUNTS = ("preroll_frames", "corrupt_packets", "container_count_mismatch")


def _container(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``io`` keys of unusual containers, each only where it applies ({} for an ordinary
    file, so its block stays as it was): ``preroll_frames``, ``corrupt_packets``,
    ``container_count_mismatch``, ``truncation`` (text), ``length_known`` False with
    ``last_frame_concealed``, and, for a file with several video streams, ``video_stream`` (the
    index of the stream scored), ``video_streams`` and ``video_stream_size`` ("WxH")."""
    out: Dict[str, Any] = {k: int(meta[k]) for k in _CONTAINER_COUNTS if meta.get(k)}
    if meta.get("truncation"):
        out["truncation"] = str(meta["truncation"])
    if meta.get("length_known") is False:
        out["length_known"] = False
        if meta.get("last_frame_concealed"):
            out["last_frame_concealed"] = True
    streams = int(meta.get("video_streams") or 1)
    if streams > 1:
        sizes = meta.get("frame_sizes") or [None]
        out.update(video_stream=int(meta.get("video_stream") or 0), video_streams=streams,
                   video_stream_size=sizes[0])
    return out


#: the keys of ``io.color``
_COLOR_KEYS = ("pix_fmt", "bits", "transfer", "primaries", "matrix", "range")
#: transfers read as SDR code values although they are not SDR -> the name in the warning
_NOT_SDR = {"smpte2084": "HDR (PQ)", "arib-std-b67": "HDR (HLG)", "linear": "linear-light"}


def _color(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """``color`` of a video file's first frame (pix_fmt, bits, transfer, primaries, matrix,
    range); {} for a source without one (images, tensors, rows read before it was recorded)."""
    color = meta.get("color")
    return {"color": {k: color.get(k) for k in _COLOR_KEYS}} if color else {}


def _transparency(meta: Mapping[str, Any]) -> Dict[str, Any]:
    """``transparent_frames`` / ``transparent_fraction`` of a source with transparent pixels;
    {} for an opaque one (its ``io`` block stays as it was before alpha was recorded)."""
    frames = int(meta.get("transparent_frames") or 0)
    if not frames:
        return {}
    return {"transparent_frames": frames,
            "transparent_fraction": float(meta.get("transparent_fraction") or 0.0)}


def decode_verdict(block: Mapping[str, Any], max_lost_fraction: float
                   ) -> Tuple[Optional[str], List[str]]:
    """(error reason or None, warnings) for an ``io`` block: an error when more than
    ``max_lost_fraction`` of the frames were lost, else warnings for any loss or decode error,
    for frames decoded with concealed errors, for a frame size that changes, for a variable
    frame rate, for an HDR or linear-light source (``color["transfer"]``) and for a source
    with transparent pixels, for unusual containers (:func:`_container_warnings`) and for a
    lens that leaves much of the frame black (:func:`geocon_torch.io.lens.lens_warning`). Frames
    missing only by the timestamps of a video whose container count equals the frames decoded
    are worded as what the timestamps suggest, not as lost while decoding."""
    lost, frac = int(block["lost_frames"]), float(block["lost_fraction"])
    total = int(block["decoded_frames"]) + lost
    first = f": {block['first_errors'][0]}" if block["first_errors"] else ""
    gaps = ("gap(s) in the file numbering" if block.get("source") == "images"
            else "timestamp gap(s)")
    by_duration = (f", {block['duration_frames']} frames by the stream's duration"
                   if block.get("duration_frames") and block.get("announced_frames") is None
                   else "")
    counts = (f"({block['decode_errors']} decode error(s), {block['timestamp_gaps']} {gaps}"
              f"{by_duration}){first}")
    what = f"{lost} of {total} frames ({100 * frac:.0f} %) were lost while decoding {counts}"
    if _count_matches(block):
        what = (f"timestamp gaps suggest {lost} of {total} frames ({100 * frac:.0f} %) are "
                f"missing, the container's count matching the frames decoded {counts}")
    if lost and frac > max_lost_fraction:
        return (f"{what}; more than io.max_lost_fraction = {max_lost_fraction:g} of the clip is "
                f"missing, so it is not scored"), []
    warnings = []
    if lost:
        warnings.append(f"{what}; scored on the frames that decoded")
    elif block["decode_errors"]:
        warnings.append(f"{block['decode_errors']} decode error(s) but no frame lost{first}")
    if block.get("concealed_frames"):
        warnings.append(f"{block['concealed_frames']} frame(s) decoded with concealed errors "
                        f"(damaged data the decoder filled in from neighbouring pixels and "
                        f"frames): scored as decoded")
    change = block.get("first_size_change")
    if block.get("size_changes") and change:
        warnings.append(f"frame size changed from {change['from']} to {change['to']} at frame "
                        f"{change['frame']} ({block['size_changes']} change(s)): frames of "
                        f"another size are resized to {change['from']}, stretched where the "
                        f"aspect ratio differs")
    if block.get("variable_frame_rate"):
        warnings.append("variable frame rate: the frame durations vary, so longer steps between "
                        "timestamps are not counted as lost frames (fps is the rate the "
                        "container reports: an average, or a nominal rate, not every step's)")
    transfer = (block.get("color") or {}).get("transfer")
    if transfer in _NOT_SDR:
        warnings.append(f"{_NOT_SDR[transfer]} source read as SDR code values without tone "
                        f"mapping: geometry scores are comparable, motion statistics are "
                        f"compressed (transfer {transfer})")
    if block.get("transparent_frames"):
        warnings.append(f"the source has an alpha channel ({_percent(block)} % of pixels "
                        f"transparent or partly so, in {block['transparent_frames']} frame(s)): "
                        f"composited over black")
    lens = lens_warning(block["lens"]) if isinstance(block.get("lens"), dict) else None
    return None, warnings + _container_warnings(block) + ([lens] if lens else [])


def _count_matches(block: Mapping[str, Any]) -> bool:
    """Whether a video's container announces exactly the frames decoded (after edit-list
    preroll): frames it lost can then only be missing between timestamps."""
    announced = block.get("announced_frames")
    if block.get("source") != "video" or announced is None:
        return False
    preroll = int(block.get("preroll_frames") or 0)
    return int(announced) - preroll == int(block["decoded_frames"])


def _container_warnings(block: Mapping[str, Any]) -> List[str]:
    """Warnings for unusual containers: a container count that does not match and shows no
    sign of a cut, a file known to be cut where no count shows it (or whose demuxer flagged
    packets corrupt, with no frame counted lost and no decode error), a container that
    records no length, several video streams."""
    out = []
    if block.get("container_count_mismatch"):
        out.append(f"the container announces {block['announced_frames']} frames but "
                   f"{block['decoded_frames']} decode and the file shows no sign of a cut (no "
                   f"decode error, no corrupt packet, its data ends before the end of the "
                   f"file): the container's count is wrong, and no frame is counted lost")
    if block.get("truncation"):
        out.append(f"the file is cut: {block['truncation']}; how many frames followed the cut "
                   f"cannot be counted")
    elif (block.get("corrupt_packets") and not block["lost_frames"]
          and not block["decode_errors"]):
        out.append(f"{block['corrupt_packets']} packet(s) flagged corrupt by the demuxer (cut "
                   f"short or damaged): frames missing after them cannot be counted")
    if block.get("length_known") is False:
        hint = ("; its last frame decoded with concealed errors, as a cut file's does"
                if block.get("last_frame_concealed") else "")
        out.append(f"the container (an MPEG transport / program stream or a raw stream) "
                   f"records no length: frames missing at the end of a cut file cannot be "
                   f"detected{hint}")
    if int(block.get("video_streams") or 1) > 1:
        out.append(f"the file has {block['video_streams']} video streams: stream "
                   f"#{block['video_stream']} ({block.get('video_stream_size')}) was scored, "
                   f"FFmpeg's best video stream (the one a player shows)")
    return out


def _percent(block: Mapping[str, Any]) -> str:
    """The transparent fraction of an ``io`` block as a percentage, at least 0.01."""
    return f"{max(100 * float(block.get('transparent_fraction') or 0.0), 0.01):.3g}"
