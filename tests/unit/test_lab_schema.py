"""emu.lab.schema: a lab file is checked before any namespace exists; errors name the field."""

import copy

import pytest

from emu.lab import schema as S

BASE = {"id": "T1", "title": "t", "topology": {"preset": "rail2x4"}, "dcqcn": "off",
        "flows": [{"name": "a", "src": "h1g1", "dst": "h2g1", "size": "1MB"}],
        "checks": [{"name": "c", "count": {"ev": "xoff"}, "expect": ">= 0",
                    "source": "theory: a count is never negative"}]}


def bad(path: str, value, match: str) -> None:
    d = copy.deepcopy(BASE)
    keys = path.split(".")
    node = d
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is KeyError:
        del node[keys[-1]]
    elif isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    with pytest.raises(ValueError, match=match):
        S.parse(d)


def test_the_minimal_lab_parses():
    lab = S.parse(copy.deepcopy(BASE))
    [v] = lab.variants
    assert (v.name, v.dcqcn, v.qos.name, v.fabric.name) == ("main", "off", "book", "rail2x4")
    assert v.flows[0].size == 1_000_000 and v.flows[0].start_s == 0.0
    assert lab.checks[0]["kind"] == "count"


@pytest.mark.parametrize("path,value,match", [
    ("flows.0.src", "h9g9", r"flows\[0\]\.src: no GPU 'h9g9' in rail2x4"),
    ("flows.0.size", "lots", r"flows\[0\]\.size: "),
    ("flows.0.start", "-3us", r"flows\[0\]\.start: must be >= 0"),
    ("flows.0.qps", 0, r"flows\[0\]\.qps: an integer 1..64"),
    ("flows.0.dscp", 64, r"flows\[0\]\.dscp: an integer 0..63"),
    ("flows.0.colour", "red", r"flows\[0\]\.colour: unknown field"),
    ("flows.0.name", KeyError, r"flows\[0\]\.name: missing"),
    ("topology", {"preset": "nosuch"}, r"topology: unknown topology 'nosuch'"),
    ("topology", {"preset": "rail2x4", "delay": "soon"}, r"topology.*delay"),
    ("dcqcn", "fast", r"dcqcn: paper, nvidia or off"),
    ("qos", "nosuch", r"qos: 'nosuch' is neither a file nor a preset"),
    ("checks.0", {"name": "c", "count": {}, "first": {}}, r"checks\[0\]: exactly one of"),
    ("checks.0", {"name": "c", "count": {}, "expect": ">> 3"}, r"checks\[0\]\.expect: not an"),
    ("checks.0", {"name": "c", "count": {}, "variant": "x"}, r"checks\[0\]\.variant: no variant"),
    ("colour", "red", r"colour: unknown field"),
    ("flows", [], r"flows: a non-empty list"),
])
def test_a_bad_field_is_named(path, value, match):
    bad(path, value, match)


def test_variants_override_and_are_checked_by_name():
    d = copy.deepcopy(BASE)
    d["variants"] = {"book": {}, "tight": {"qos_overrides": {"pfc": {"xoff": "100KB",
                                                                     "xon": "50KB"}}}}
    lab = S.parse(d)
    assert [v.name for v in lab.variants] == ["book", "tight"]
    assert lab.variants[1].qos.pfc.xoff_bytes == 100_000
    assert lab.variants[0].qos.pfc.xoff_bytes == 3_200_000
    d["variants"]["tight"] = {"flows": [{"name": "a", "src": "h1g1", "dst": "nope", "size": 1}]}
    with pytest.raises(ValueError, match=r"variants\.tight\.flows\[0\]\.dst: no GPU"):
        S.parse(d)


def test_a_topology_override_and_a_tdf_given_on_the_command_line():
    d = copy.deepcopy(BASE)
    d["topology"] = {"preset": "rail3x3", "spines": 1, "delay": "5us"}
    lab = S.parse(d, tdf=20000)
    fab = lab.variants[0].fabric
    assert (len(fab.gpus), fab.tdf) == (9, 20000.0)
    assert {round(link.delay_s * 1e6, 3) for link in fab.links if link.kind != "frontend"} == {5.0}


def test_links_named_in_captures_must_exist():
    d = copy.deepcopy(BASE)
    d["captures"] = ["rail1->spine9"]
    with pytest.raises(ValueError, match=r"captures\[0\]: no link from rail1 to spine9"):
        S.parse(d)


def test_every_catalogue_lab_loads():
    paths = S.catalogue()
    assert paths, "labs/ is empty"
    for p in paths:
        lab = S.load(str(p))
        assert lab.id == p.stem and lab.story and lab.checks
    assert S.load("l11.4").id == "L11.4"  # ids are case-insensitive


def test_a_workload_lab_and_interface_captures():
    d = {k: v for k, v in copy.deepcopy(BASE).items() if k != "flows"}
    d.update(topology={"preset": "rail2x2"}, captures=["h2:fe0", "h1:lo", "rail1->h1"],
             workload={"name": "allreduce", "size": "4KB", "iters": 1, "ring": "rank",
                       "master_port": 12345})
    [v] = S.parse(d).variants
    assert v.flows == [] and v.workload["ring"] == "rank" and v.workload["master_port"] == 12345
    assert v.captures == ["h2:fe0", "h1:lo", "rail1->h1"]
    for key, val, match in [("ring", "ring", r"workload\.ring: rail or rank"),
                            ("name", "bert", r"workload\.name: one of allreduce"),
                            ("master_port", 0, r"workload\.master_port: a port"),
                            ("iters", 0, r"workload\.iters: an integer >= 1"),
                            ("size", "huge", r"workload\.size"),
                            ("gpus", 3, r"workload\.gpus: unknown field")]:
        e = copy.deepcopy(d)
        e["workload"][key] = val
        with pytest.raises(ValueError, match=match):
            S.parse(e)
    e = copy.deepcopy(d)
    e["captures"] = ["h2:nic9"]
    with pytest.raises(ValueError, match=r"captures\[0\]: no interface 'h2:nic9'"):
        S.parse(e)
    e = copy.deepcopy(d)
    e["flows"] = BASE["flows"]
    with pytest.raises(ValueError, match="flows or a workload, not both"):
        S.parse(e)


def test_a_yaml_boolean_key_in_a_selector_is_named():
    import yaml
    d = copy.deepcopy(BASE)
    d["checks"] = yaml.safe_load("- {name: c, count: {ev: pfc_oper, on: true}}")
    with pytest.raises(ValueError, match=r"checks\[0\]\.count: a key read as True"):
        S.parse(d)
