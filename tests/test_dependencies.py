"""The dependencies say one thing everywhere: pyproject.toml's dependencies and extras, requirements.txt's pins and
the Colab set (requirements-colab.txt) name the same packages, and every pin lies in pyproject's range."""
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """{package: pinned version} of a requirements file, following its `-r` includes (`-e .` is the library)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line == "-e .":
            continue
        if line.startswith("-r "):
            out.update(pins(path.parent / line[3:].strip()))
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path.name}: {line!r} is not pinned with =="
        out[norm(name)] = version
    return out


def ranges(specs) -> dict[str, Requirement]:
    return {norm(r.name): r for r in map(Requirement, specs)}


def test_requirements_pin_exactly_pyprojects_dependencies_and_extras():
    extras = dict(PYPROJECT["optional-dependencies"])
    assert set(extras) == {"lab", "track", "ray", "dev", "vllm"}
    # vllm: a CUDA machine's engine, kept out of the one environment (gigabytes), pinned exactly in pyproject
    assert [str(r) for r in ranges(extras.pop("vllm")).values()] == ["vllm==0.32.0"]
    declared = {**ranges(PYPROJECT["dependencies"]), **{k: r for extra in extras.values()
                                                       for k, r in ranges(extra).items()}}
    pinned = pins(REPO / "requirements.txt")
    assert sorted(pinned) == sorted(declared)
    for name, version in pinned.items():
        assert declared[name].specifier.contains(version, prereleases=True), \
            f"requirements.txt pins {name}=={version}, outside pyproject's {declared[name]}"


def test_the_colab_set_is_the_runtime_without_what_colab_brings():
    colab = pins(REPO / "requirements-colab.txt")
    runtime = ranges(PYPROJECT["dependencies"])
    assert sorted(colab) == sorted(set(runtime) - {"torch", "ipykernel"})
    for name in ("torch", "ipykernel", "jupyterlab", "jupyter", "notebook", "ipywidgets", "pytest", "pytest-xdist",
                 "ruff"):
        assert name not in colab, f"requirements-colab.txt pins {name}, which Colab brings or a user does not need"


def test_every_runtime_dependency_is_imported_and_python_is_311():
    assert PYPROJECT["requires-python"] == ">=3.11"  # the pins (numpy 2.4, pandas 3) need 3.11
    module = {"scikit-learn": "sklearn", "pyyaml": "yaml"}
    code = "\n".join(p.read_text() for folder in ("lib", "bench", "notebooks") for p in (REPO / folder).rglob("*")
                     if p.suffix in (".py", ".ipynb"))
    for name in ranges(PYPROJECT["dependencies"]):
        if name == "ipykernel":  # the kernel papermill starts, never imported
            continue
        mod = module.get(name, name.replace("-", "_"))
        assert re.search(rf"(import|from) {mod}\b", code), f"{name} is a dependency that nothing imports"
