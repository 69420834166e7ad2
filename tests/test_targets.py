"""The target registry and the route table: complete, sourced, consistent."""

import pytest

from exporter.routes import all_routes
from exporter.targets import all_targets, get_target, variants

REQUIRED = {  # DESIGN.md's hardware table and issue #3: name or alias -> (accelerator kind, htp arch)
    "qcs6490": ("htp", 68), "rb3-gen2": ("htp", 68), "sa8775p": ("htp", 73), "sm8650": ("htp", 75), "galaxy-s24": ("htp", 75),
    "sm8750": ("htp", 79), "galaxy-s25": ("htp", 79), "x-elite": ("htp", 73), "x1e80100": ("htp", 73),
    "ryzen-ai-npu": ("vitisai", None), "radeon-890m": ("gpu", None), "nvidia-rtx": ("cuda", None),
    "cpu-x86": ("cpu", None), "cpu-arm64": ("cpu", None),
}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_design_target_exists_with_its_accelerator(name):
    t = get_target(name)
    assert (t.accelerator.kind, t.accelerator.htp_arch) == REQUIRED[name]
    assert t.formats and t.precisions and t.ram_bytes > t.os_reserved_bytes >= 0


def test_htp_facts_and_their_sources():
    v68 = get_target("qcs6490")
    assert v68.accelerator.soc_model == 35 and not v68.accelerator.float_support and not v68.accelerator.int4_weights
    assert "fp16" not in v68.precisions and "w4a16" not in v68.precisions
    assert get_target("sm8650").accelerator.soc_model == 57 and get_target("sm8750").accelerator.soc_model == 69
    assert get_target("x-elite").accelerator.soc_model == 60
    for t in all_targets():
        if t.accelerator.kind == "htp":
            assert t.hub_chipset and t.hub_chipset.startswith("qualcomm-"), t.name
            assert t.accelerator.per_graph_limit_bytes, t.name
            for fact in ("htp_arch", "soc_model", "float_support", "weight_sharing", "ram_gib"):
                assert t.sources.get(fact), f"{t.name}: no source for {fact}"


def test_os_variants_change_the_abi_and_memory():
    cpu = {t.os: t for t in variants("cpu-x86")}
    assert set(cpu) == {"linux", "wsl", "windows"}
    assert cpu["windows"].abi == "win-amd64" and cpu["wsl"].abi == "linux-x86_64"
    assert cpu["wsl"].ram_bytes < 31 * 2**30  # the WSL VM limit, not the laptop's RAM
    rtx = {t.os: t for t in variants("nvidia-rtx")}
    assert set(rtx) == {"windows", "wsl"} and all(t.vram_bytes for t in rtx.values())
    assert get_target("x-elite").abi == "win-arm64" and get_target("galaxy-s25").abi.startswith("android")


def test_ram_sku_must_be_listed():
    from exporter.errors import UsageError

    assert get_target("x-elite").with_ram(16).ram_bytes == 16 * 2**30
    with pytest.raises(UsageError, match="no 20 GiB RAM SKU"):
        get_target("x-elite").with_ram(20)


def test_twelve_routes_each_deploying_to_registry_targets():
    routes = all_routes()
    assert len(routes) == 12 and len({r.id for r in routes}) == 12
    joint = next(r for r in routes if r.id == "igpu-npu")
    assert {d.name for d in joint.deployments} == {"with-nvidia", "without-nvidia"}
    names = {t.name for t in all_targets()}
    for r in routes:
        for d in r.deployments:
            assert set(d.targets) <= names and d.host in names


def test_targets_show_prints_every_fact_with_sources():
    from typer.testing import CliRunner

    from exporter.cli import app

    r = CliRunner().invoke(app, ["targets", "show", "rb3-gen2", "--json"])
    assert r.exit_code == 0, r.output
    import json

    data = json.loads(r.stdout)
    assert data["name"] == "qcs6490" and data["hub_chipset"] == "qualcomm-qcs6490" and data["sources"]["soc_model"]
    r = CliRunner().invoke(app, ["targets", "show", "galaxy-s24"])
    assert r.exit_code == 0
