"""The Spack recipe (packaging/spack/packages/py-deisa-insitu/package.py) against pyproject.toml.

Spack is not needed: the recipe is imported with a stand-in of the part of Spack's package API
it uses (``spack.package``'s directives, and the ``PythonPackage`` base class where Spack 1.x
keeps it, ``spack_repo.builtin.build_systems.python``, or where older Spack did), which records
each directive. Its version, its Python dependencies and their versions must be
pyproject.toml's, each optional extra (but ``test``) a variant of the same name; ``+plugin``
builds and installs the plugin with the CMake target and component that plugin/pdi/CMakeLists.txt
defines, and puts its directory on ``PDI_PLUGIN_PATH``.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from conftest import REPO
from packaging.requirements import Requirement

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

RECIPE = REPO / "packaging" / "spack" / "packages" / "py-deisa-insitu" / "package.py"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The extras without a variant: the test suite's, ucx (distributed-ucxx-cu12, a RAPIDS wheel
# that Spack does not package: pip-install it into the Spack environment; the recipe says so), and
# adios2 (PyPI's serial adios2 wheel, for deisa.Replay of .bp output: Spack has no py-adios2, its
# adios2 package's +python variant provides the module; the recipe says so). The recipe's
# +adios2 is not that extra: like +plugin, it builds C++ (the deisa ADIOS2 engine).
BUILD_VARIANTS = ("plugin", "adios2")
NOT_VARIANTS = frozenset({"test", "ucx", "adios2"})
BUILDS = frozenset(f"+{variant}" for variant in BUILD_VARIANTS)
SPEC = re.compile(r"(?P<name>[a-z0-9-]+)(?:@(?P<versions>\S+))?(?P<variants>(?:\s*[+~]\w+)*)")


@dataclass(frozen=True)
class Dependency:
    """One ``depends_on``: the package, its version range and variants, as Spack spells them."""

    name: str
    versions: str
    variants: frozenset[str]
    types: frozenset[str]
    when: str | None


@dataclass
class Directives:
    """What the recipe's class body declared."""

    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    dependencies: list[Dependency] = field(default_factory=list)
    run_after: list[tuple[str, str]] = field(default_factory=list)


def parse_spec(text: str) -> tuple[str, str, frozenset[str]]:
    match = SPEC.fullmatch(text.strip())
    assert match, f"not a spec this test reads: {text!r}"
    variants = frozenset(re.findall(r"[+~]\w+", match["variants"]))
    return match["name"], match["versions"] or "", variants


def spack_stand_in(directives: Directives, spack_1: bool) -> dict[str, ModuleType | None]:
    """``sys.modules`` entries standing for Spack 1.x (``spack_1``) or an older Spack."""

    class PythonPackage:
        """Spack's base class of pip-installed packages (its directives are what counts)."""

    def version(name: str, *args: Any, **kwargs: Any) -> None:
        directives.versions[name] = kwargs

    def variant(name: str, default: Any = None, description: str = "", **kwargs: Any) -> None:
        directives.variants[name] = {"default": default, "description": description, **kwargs}

    def depends_on(spec: str, when: str | None = None, **kwargs: Any) -> None:
        name, versions, variants = parse_spec(spec)
        deptypes = kwargs.get("type", ("build", "link"))  # Spack's default
        types = frozenset([deptypes] if isinstance(deptypes, str) else deptypes)
        directives.dependencies.append(Dependency(name, versions, variants, types, when))

    def run_after(phase: str, when: str | None = None) -> Any:
        def decorate(method: Any) -> Any:
            directives.run_after.append((phase, method.__name__))
            return method

        return decorate

    def join_path(*parts: str) -> str:
        return "/".join(parts)

    package = ModuleType("spack.package")
    names = {"version": version, "variant": variant, "depends_on": depends_on}
    names.update(run_after=run_after, join_path=join_path)
    if not spack_1:
        names["PythonPackage"] = PythonPackage
    vars(package).update(names, __all__=sorted(names))
    modules: dict[str, ModuleType | None] = {"spack": ModuleType("spack"), "spack.package": package}
    if spack_1:
        python = ModuleType("spack_repo.builtin.build_systems.python")
        python.PythonPackage = PythonPackage  # type: ignore[attr-defined]
        for name in ("spack_repo", "spack_repo.builtin", "spack_repo.builtin.build_systems"):
            modules[name] = ModuleType(name)
        modules["spack_repo.builtin.build_systems.python"] = python
    else:  # `from spack_repo...` raises ImportError
        modules["spack_repo"] = None
    return modules


@pytest.fixture(params=["spack-1", "spack-0"])
def recipe(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The recipe's module, imported against the stand-in of Spack 1.x or of an older Spack;
    ``recipe.directives`` holds what its class declared."""
    directives = Directives()
    for name, module in spack_stand_in(directives, request.param == "spack-1").items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("py_deisa_insitu_recipe", RECIPE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.directives = directives  # type: ignore[attr-defined]
    return module


def spack_dependency(requirement: str, types: set[str], when: str | None) -> Dependency:
    """A pyproject.toml requirement as the recipe must spell it: ``py-<name>``, ``>=X`` as
    ``@X:``, extras as variants."""
    parsed = Requirement(requirement)
    bounds = [(s.operator, s.version) for s in parsed.specifier]
    assert all(op == ">=" for op, _ in bounds) and len(bounds) <= 1, (
        f"{requirement}: only a lower bound (>=) is translated to Spack's ranges here"
    )
    name = "py-" + re.sub(r"[-_.]+", "-", parsed.name).lower()
    versions = f"{bounds[0][1]}:" if bounds else ""
    variants = frozenset(f"+{extra}" for extra in parsed.extras)
    return Dependency(name, versions, variants, frozenset(types), when)


def expected_python_dependencies() -> set[Dependency]:
    project = PYPROJECT["project"]
    expected = {spack_dependency(r, {"build"}, None) for r in PYPROJECT["build-system"]["requires"]}
    python = re.fullmatch(r">=\s*([\d.]+)", project["requires-python"])
    assert python, project["requires-python"]
    expected.add(
        Dependency("python", f"{python[1]}:", frozenset(), frozenset({"build", "run"}), None)
    )
    expected.update(spack_dependency(r, {"build", "run"}, None) for r in project["dependencies"])
    for extra, requirements in project["optional-dependencies"].items():
        if extra not in NOT_VARIANTS:  # the test suite and the linters: not the package's
            expected.update(
                spack_dependency(r, {"build", "run"}, f"+{extra}") for r in requirements
            )
    return expected


def test_recipe_version_is_pyprojects(recipe: Any) -> None:
    assert list(recipe.directives.versions) == [PYPROJECT["project"]["version"]]


def test_recipe_python_dependencies_are_pyprojects(recipe: Any) -> None:
    """Every requirement of pyproject.toml (build system, Python, dependencies, extras) with its
    version bound, and no other Python dependency outside ``+plugin``."""
    ours = {
        d
        for d in recipe.directives.dependencies
        if d.when not in BUILDS and (d.name == "python" or d.name.startswith("py-"))
    }
    expected = expected_python_dependencies()
    assert sorted(ours - expected, key=str) == [], "in the recipe, not in pyproject.toml"
    assert sorted(expected - ours, key=str) == [], "in pyproject.toml, not in the recipe"
    others = {d.name for d in recipe.directives.dependencies if d.when not in BUILDS} - {
        d.name for d in ours
    }
    assert others == set()


def test_recipe_variants_are_the_extras_and_the_builds(recipe: Any) -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"]) - NOT_VARIANTS
    assert set(recipe.directives.variants) == extras | set(BUILD_VARIANTS)
    whens = {d.when for d in recipe.directives.dependencies} - {None}
    assert whens == {f"+{variant}" for variant in recipe.directives.variants}


def test_recipe_plugin_builds_against_pdi_112_with_python(recipe: Any) -> None:
    plugin = {d.name: d for d in recipe.directives.dependencies if d.when == "+plugin"}
    assert (plugin["pdi"].versions, plugin["pdi"].variants) == ("1.12:", frozenset({"+python"}))
    assert {"link", "run"} <= plugin["pdi"].types
    assert {"link", "run"} <= plugin["python"].types  # the plugin embeds this Python
    assert {"link", "run"} <= plugin["mpi"].types
    top = (REPO / "CMakeLists.txt").read_text()
    cmake_minimum = re.search(r"cmake_minimum_required\(VERSION ([\d.]+)\)", top)
    assert cmake_minimum and plugin["cmake"].versions == f"{cmake_minimum[1]}:"
    assert plugin["cmake"].types == {"build"}


class Command:
    """Records the calls of a Spack ``Executable``."""

    def __init__(self, path: str) -> None:
        self.path, self.calls = path, []

    def __call__(self, *args: str) -> None:
        self.calls.append(list(args))


class Spec:
    def __init__(self, variants: str) -> None:
        self.variants = variants.split()
        self.commands = {"cmake": Command("/spack/cmake"), "python": Command("/spack/python3")}

    def satisfies(self, constraint: str) -> bool:
        return constraint in self.variants

    def __getitem__(self, name: str) -> Any:
        return SimpleNamespace(command=self.commands[name])


def package(recipe: Any, variants: str) -> Any:
    """An instance of the recipe's class for a spec with ``variants``, as Spack builds it."""
    instance = recipe.PyDeisaInsitu()
    instance.spec = Spec(variants)
    instance.stage = SimpleNamespace(path="/stage", source_path="/stage/src")
    instance.prefix = SimpleNamespace(lib="/spack/opt/py-deisa-insitu/lib")
    recipe.make_jobs = 3  # Spack sets it in the recipe's module before building
    return instance


def test_recipe_plugin_installs_the_cmake_component_on_pdi_plugin_path(recipe: Any) -> None:
    assert ("install", "install_plugin") in recipe.directives.run_after
    built = package(recipe, "+plugin +launcher")
    built.install_plugin()
    plugin_dir = "/spack/opt/py-deisa-insitu/lib"
    build = "/stage/spack-build-plugin"
    configure = ["-S", "/stage/src", "-B", build, "-DCMAKE_BUILD_TYPE=Release"]
    configure += ["-DPython3_EXECUTABLE=/spack/python3", f"-DINSTALL_PDIPLUGINDIR={plugin_dir}"]
    configure += [f"-DINSTALL_ADIOS2PLUGINDIR={plugin_dir}"]
    assert built.spec.commands["cmake"].calls == [
        configure,
        ["--build", build, "--target", "pdi_deisa_plugin", "--parallel", "3"],
        ["--install", build, "--component", "deisa_plugin"],
    ]
    cmake = (REPO / "plugin" / "pdi" / "CMakeLists.txt").read_text()
    assert "add_library(pdi_deisa_plugin MODULE" in cmake  # the target built
    install = (
        r'install\(TARGETS pdi_deisa_plugin .*"\$\{INSTALL_PDIPLUGINDIR\}" COMPONENT deisa_plugin\)'
    )
    assert re.search(install, cmake)  # the component installed, where the recipe says

    class Environment:
        def __init__(self) -> None:
            self.prepended: list[tuple[str, str]] = []

        def prepend_path(self, name: str, value: str) -> None:
            self.prepended.append((name, value))

    env = Environment()
    built.setup_run_environment(env)
    assert env.prepended == [("PDI_PLUGIN_PATH", plugin_dir)]
    engine = package(recipe, "+adios2 +launcher")
    engine.install_plugin()
    engine.setup_run_environment(env := Environment())
    assert engine.spec.commands["cmake"].calls == [
        configure,
        ["--build", build, "--target", "deisa_adios2_engine", "--parallel", "3"],
        ["--install", build, "--component", "deisa_adios2_engine"],
    ]
    assert env.prepended == [("ADIOS2_PLUGIN_PATH", plugin_dir)]
    adios2_cmake = (REPO / "plugin" / "adios2" / "CMakeLists.txt").read_text()
    engine_install = (
        r'install\(TARGETS deisa_adios2_engine .*"\$\{INSTALL_ADIOS2PLUGINDIR\}" '
        r"COMPONENT deisa_adios2_engine\)"
    )
    assert re.search(engine_install, adios2_cmake)
    without = package(recipe, "~plugin ~adios2 +launcher")
    without.install_plugin()
    without.setup_run_environment(env := Environment())
    assert without.spec.commands["cmake"].calls == [] and env.prepended == []


@pytest.mark.parametrize("launcher", ["+launcher", "~launcher"])
def test_recipe_import_modules_are_packages(recipe: Any, launcher: str) -> None:
    modules = package(recipe, launcher).import_modules
    assert ("deisa.launcher" in modules) == (launcher == "+launcher")
    packages = set(PYPROJECT["tool"]["setuptools"]["packages"])
    for module in modules:
        assert module in packages and (REPO / Path(*module.split(".")) / "__init__.py").exists()


def test_every_package_of_the_tree_is_listed_in_pyproject() -> None:
    """A wheel holds only the packages pyproject.toml lists: a new sub-package (deisa/bridge/shm/,
    issue 55) that is left out imports in an editable install and is missing from the wheel."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for root in ("deisa", "deisa_simulation")
        for init in (REPO / root).rglob("__init__.py")
    }
    assert sorted(found - listed) == []
