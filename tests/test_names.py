import pytest

from exporter.errors import UnknownNameError
from exporter.targets import get_target
from recipes import get_recipe


def test_unknown_target_suggests_nearest():
    with pytest.raises(UnknownNameError) as e:
        get_target("qcs6940")
    assert e.value.suggestions[0] == "qcs6490"
    assert "did you mean 'qcs6490'" in str(e.value)


def test_alias_resolves_to_target():
    assert get_target("rb3-gen2").name == "qcs6490"
    assert get_target("CPU-X86").name == "cpu-x86-linux"
    assert get_target("cpu").name == "cpu-x86-linux"
    assert get_target("galaxy-s25").name == "sm8750" and get_target("x1e80100").name == "x-elite"
    assert get_target("nvidia-rtx").name == "nvidia-rtx-windows"


def test_unknown_recipe_suggests_nearest():
    with pytest.raises(UnknownNameError) as e:
        get_recipe("tiny-ln")
    assert "tiny-lm" in e.value.suggestions
    assert e.value.exit_code == 2
