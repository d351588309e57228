"""The YAML swap: configs/heat_hdf5.yml and configs/heat_deisa.yml differ only in their plugin."""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _lines(name: str) -> list[str]:
    return (CONFIGS / name).read_text().splitlines()


def test_heat_configs_differ_by_at_most_4_lines() -> None:
    hdf5, deisa = _lines("heat_hdf5.yml"), _lines("heat_deisa.yml")
    diff = [d for d in difflib.ndiff(hdf5, deisa) if d[:2] in ("- ", "+ ")]
    removed = [d for d in diff if d.startswith("- ")]
    added = [d for d in diff if d.startswith("+ ")]
    assert len(removed) <= 4 and len(added) <= 4, "\n".join(diff)


def test_heat_configs_differ_only_in_plugins_section() -> None:
    hdf5, deisa = _lines("heat_hdf5.yml"), _lines("heat_deisa.yml")
    plugins_line = hdf5.index("plugins:")
    assert deisa.index("plugins:") == plugins_line
    matcher = difflib.SequenceMatcher(a=hdf5, b=deisa, autojunk=False)
    for tag, i1, _i2, j1, _j2 in matcher.get_opcodes():
        if tag != "equal":
            assert i1 > plugins_line and j1 > plugins_line, (tag, hdf5[i1:_i2], deisa[j1:_j2])
    hdf5_tree = yaml.safe_load("\n".join(hdf5))
    deisa_tree = yaml.safe_load("\n".join(deisa))
    assert {k: v for k, v in hdf5_tree.items() if k != "plugins"} == {
        k: v for k, v in deisa_tree.items() if k != "plugins"
    }


def test_heat_configs_swap_decl_hdf5_for_deisa() -> None:
    hdf5 = yaml.safe_load((CONFIGS / "heat_hdf5.yml").read_text())["plugins"]
    deisa = yaml.safe_load((CONFIGS / "heat_deisa.yml").read_text())["plugins"]
    assert set(hdf5) == {"mpi", "decl_hdf5"} and set(deisa) == {"mpi", "deisa"}
    assert hdf5["decl_hdf5"]["file"] == "heat.h5"
    assert deisa["deisa"]["scheduler_file"] == "scheduler.json"
    # everything that describes the data is shared
    for key in ("communicator", "datasets", "write"):
        assert hdf5["decl_hdf5"][key] == deisa["deisa"][key]


def test_simulation_config_has_contract_keys() -> None:
    simu = yaml.safe_load((CONFIGS / "simulation.yml").read_text())
    assert set(simu) == {"global_size", "process_grid", "steps", "output_period"}
    assert len(simu["global_size"]) == 2 and len(simu["process_grid"]) == 2
    assert all(isinstance(v, int) and v > 0 for v in [*simu["global_size"], *simu["process_grid"]])


# every key of decl_hdf5's grammar in PDI 1.12 (plugins/decl_hdf5: file_op.cxx, dataset_op.cxx,
# attribute_op.cxx, selection.cxx), by where it goes
DECL_HDF5_KEYS = {
    "FILE_DESC": {
        "file", "collision_policy", "on_event", "when", "communicator", "datasets", "deflate",
        "fletcher", "subfiling", "write", "read", "logging",
    },
    "DATA_IO_DESC": {
        "dataset", "when", "communicator", "memory_selection", "dataset_selection", "chunking",
        "deflate", "fletcher", "attributes", "mpio", "collision_policy", "attribute", "size_of",
    },
    "SELECTION_DESC": {"size", "start"},
}  # fmt: skip


def test_yaml_reference_says_what_deisa_does_with_every_decl_hdf5_key() -> None:
    text = (CONFIGS.parent / "docs" / "yaml-reference.md").read_text()
    table = text.split("## `decl_hdf5` keys and what deisa does with them", 1)[1].split("\n## ")[0]
    listed: dict[str, set[str]] = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`") and cells[2]:
            keys = {k.split(" ")[0] for k in cells[0].split("`")[1::2]}
            listed.setdefault(cells[1].split("`")[1], set()).update(keys)
    for where, keys in DECL_HDF5_KEYS.items():
        missing = keys - listed.get(where, set())
        assert not missing, f"{where}: {sorted(missing)}"
