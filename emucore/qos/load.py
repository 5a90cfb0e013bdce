"""Load a QoS configuration: a preset name, a YAML file, an NX-OS file or a dict.

Presets live beside this module (`presets/book.yaml`, `presets/paper.yaml`); the schema is
`emucore.qos.qosconfig`, the NX-OS dialect `emucore.qos.nxos` (docs/FABRIC_FACTS.md
"Switch QoS for RoCEv2").
"""

from __future__ import annotations

from pathlib import Path

import yaml

from emucore import yamlcache
from emucore.qos.qosconfig import QosConfig
from emucore.qos.nxos import parse_nxos

PRESET_DIR = Path(__file__).resolve().parent / "presets"
NXOS_SUFFIXES = (".nxos", ".cfg", ".conf")


def preset_names() -> list[str]:
    """The QoS presets shipped with emu (`book`, `paper`)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_qos(source: str | Path | dict) -> QosConfig:
    """A dict, a YAML file, an NX-OS file (.nxos/.cfg/.conf) or a preset name (book, paper)."""
    if isinstance(source, dict):
        return QosConfig.from_dict(source)
    path = Path(source)
    if not path.is_file():
        preset = PRESET_DIR / f"{source}.yaml"
        if isinstance(source, str) and "/" not in source and preset.is_file():
            path = preset
        else:
            raise ValueError(f"qos: {str(source)!r} is neither a file nor a preset "
                             f"({', '.join(preset_names())})")
    if path.suffix in NXOS_SUFFIXES:
        return parse_nxos(path.read_text())
    try:
        data = yamlcache.load_file(path)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    return QosConfig.from_dict(data, source=str(path.name))
