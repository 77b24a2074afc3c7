"""Every clip in ../shared/data decodes with the right frame count (and size, fps)."""
import pytest

from geocon_torch.io import probe_video, read_clip

# path, frames, source (H, W), fps (None: image folder)
SHARED = [
    ("real/realshort.mp4", 36, (240, 320), 30.0),
    ("real/box.mp4", 455, (480, 640), 30.0),  # the container announces 456; 455 decode
    ("real/vtest_120.mp4", 120, (576, 768), 10.0),
    ("real/bikes.mp4", 250, (272, 640), 25.0),
    ("aigc/cogvideox/1.mp4", 49, (480, 720), 8.0),
    ("aigc/cogvideox/3.mp4", 49, (480, 720), 8.0),
    ("real/graf", 2, (640, 800), None),
    ("real/hill", 3, (300, 400), None),
]


@pytest.mark.parametrize("rel, frames, size, fps", SHARED, ids=[s[0] for s in SHARED])
def test_shared_clip_frame_count(shared_data, rel, frames, size, fps):
    clip = read_clip(shared_data / rel, long_side=96)
    assert clip.num_frames == frames
    assert clip.meta["decoded_frames"] == frames == clip.meta["num_source_frames"]
    assert clip.frame_indices.tolist() == list(range(frames))
    assert clip.source_size == size and max(clip.size) == 96
    assert clip.content_mask.shape == clip.size
    assert not clip.meta["truncated"]
    if fps is not None:
        assert clip.fps == pytest.approx(fps, rel=0.002)
        assert probe_video(shared_data / rel, exact=False).fps == pytest.approx(fps, rel=0.002)


def test_box_container_count_is_wrong_and_probe_decodes(shared_data):
    info = probe_video(shared_data / "real/box.mp4")
    assert info.container_frames == 456 and info.num_frames == 455 and info.counted == "decoded"
    assert (info.height, info.width, info.codec) == (480, 640, "h264")
    trusted = probe_video(shared_data / "real/box.mp4", exact=False)
    assert trusted.num_frames == 456 and trusted.counted == "container"
    assert read_clip(shared_data / "real/box.mp4", long_side=64, stride=5).num_frames == 91


def test_shared_images_natural_order(shared_data):
    clip = read_clip(shared_data / "real/hill", long_side=None)
    assert clip.meta["files"] == ["1.JPG", "2.JPG", "3.JPG"]
    assert clip.size == (300, 400) and clip.scale == 1.0
    graf = read_clip(shared_data / "real/graf", long_side=1024)
    assert graf.meta["files"] == ["graf1.png", "graf3.png"] and graf.size == (820, 1024)
