"""A SAM-2 model-config YAML is code (hydra calls each ``_target_``): before SAM-2 builds it,
geocon composes it and refuses any ``_target_`` that is not a class of the sam2 package
(audit s20 M1). No model is built here: ``build`` stands in for
``sam2.build_sam.build_sam2_video_predictor`` doing what it does (compose, resolve,
instantiate the model), so the tests are fast and need no weights."""
import sys
from pathlib import Path

import pytest

from geocon_torch.errors import ConfigError
from geocon_torch.segment.sam2 import _build_unloaded

SHIPPED = ["configs/sam2.1/sam2.1_hiera_t.yaml", "configs/sam2.1/sam2.1_hiera_s.yaml",
           "configs/sam2.1/sam2.1_hiera_b+.yaml", "configs/sam2.1/sam2.1_hiera_l.yaml",
           "configs/sam2/sam2_hiera_t.yaml", "configs/sam2/sam2_hiera_s.yaml",
           "configs/sam2/sam2_hiera_b+.yaml", "configs/sam2/sam2_hiera_l.yaml"]


@pytest.fixture
def sam2_package(tmp_path_factory):
    """The sam2 package (hydra is set back to its configs after a YAML path): the installed
    one, else an empty stub package (as the audit's probe used)."""
    try:
        import sam2  # noqa: F401

        yield "installed"
        return
    except ImportError:
        pass
    root = tmp_path_factory.mktemp("stub")
    (root / "sam2").mkdir()
    (root / "sam2" / "__init__.py").write_text("")
    sys.path.insert(0, str(root))
    try:
        yield "stub"
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("sam2", None)


class _Build:
    """What ``build_sam2_video_predictor`` does with a config (without its sam2-only
    top-level override): compose, resolve, instantiate ``model``; records each call."""

    def __init__(self, instantiate: bool = True):
        self.calls, self.instantiate = [], instantiate

    def __call__(self, config_file, ckpt_path=None, device="cuda", hydra_overrides_extra=()):
        from hydra import compose
        from hydra.utils import instantiate
        from omegaconf import OmegaConf

        self.calls.append(config_file)
        if not self.instantiate:
            return "model"
        cfg = compose(config_name=config_file, overrides=list(hydra_overrides_extra))
        OmegaConf.resolve(cfg)
        return instantiate(cfg.model, _recursive_=True)


def _savetxt(marker: Path, indent: str) -> str:
    """A hydra node calling numpy.savetxt to write ``marker`` (the audit's payload wrote a
    .pth that Python runs at start-up)."""
    return (f"{indent}_target_: numpy.savetxt\n{indent}fname: {marker}\n{indent}X: [[0]]\n"
            f"{indent}fmt: '%d'\n{indent}comments: ''\n{indent}header: planted by the YAML\n")


@pytest.mark.parametrize("layout, key, target, problem", [
    ("direct", "model.image_encoder._target_", "numpy.savetxt", "outside the sam2 package"),
    ("list", "model.blocks[1]._target_", "numpy.savetxt", "outside the sam2 package"),
    ("interpolation", "model.image_encoder._target_", "numpy.savetxt",
     "outside the sam2 package"),
    ("through_sam2", "model.image_encoder._target_", "sam2.modeling.sam2_base.torch.save",
     None),
    ("other_sam2_module", "model.image_encoder._target_", "sam2.benchmark.run",
     "outside sam2's model modules (sam2.modeling., sam2.sam2_video_predictor.)"),
])
def test_a_yaml_naming_a_target_outside_sam2_is_refused_before_anything_is_called(
        tmp_path, sam2_package, layout, key, target, problem):
    marker = tmp_path / "planted"
    if layout == "direct":
        body = "model:\n  image_encoder:\n" + _savetxt(marker, "    ")
    elif layout == "list":
        body = ("model:\n  blocks:\n    - {}\n    -\n" + _savetxt(marker, "      "))
    elif layout == "interpolation":
        body = "evil:\n" + _savetxt(marker, "  ") + "model:\n  image_encoder: ${evil}\n"
    else:  # a name under sam2 reaching torch.save through a module sam2 imports, or a sam2
        # module that is a script (sam2.benchmark runs a benchmark when imported)
        body = f"model:\n  image_encoder:\n    _target_: {target}\n    obj: 0\n    f: {marker}\n"
    yaml = tmp_path / "evil_sam2.yaml"
    yaml.write_text("# @package _global_\n" + body)
    build = _Build()
    with pytest.raises(ConfigError) as exc:
        _build_unloaded(build, str(yaml), "cpu", ["++model.image_size=256"])
    msg = str(exc.value)
    assert msg.startswith(f"segment.sam2_config {str(yaml)!r}: {key} = {target!r} is ")
    if problem is not None:
        assert f"is {problem}; a SAM-2 model config may only build" in msg
    elif sam2_package == "installed":
        assert ("is not a class of the sam2 package (it is the function "
                "torch.serialization.save)") in msg
    assert "a model config is code" in msg
    assert not marker.exists() and build.calls == []


def test_a_yaml_of_sam2_classes_is_built_and_no_extra_targets_are_allowed(tmp_path):
    """Meta's model configs name only sam2 classes: each passes, by name or as a copied YAML
    path, and reaches SAM-2's builder; SAM2_EXTRA_TARGETS is empty."""
    pytest.importorskip("sam2.modeling")
    import sam2
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from geocon_torch.segment.sam2 import SAM2_EXTRA_TARGETS

    assert SAM2_EXTRA_TARGETS == frozenset()
    if not GlobalHydra.instance().is_initialized():
        initialize_config_module("sam2", version_base="1.2")
    build = _Build(instantiate=False)
    for name in SHIPPED:
        assert _build_unloaded(build, name, "cpu", ["++model.image_size=256"]) == "model"
    copy = tmp_path / "my_tiny.yaml"
    copy.write_text((Path(sam2.__path__[0]) / SHIPPED[0]).read_text())
    assert _build_unloaded(build, str(copy), "cpu", []) == "model"
    assert build.calls == SHIPPED + ["my_tiny.yaml"]
    assert GlobalHydra.instance().is_initialized()  # set back to sam2's configs
