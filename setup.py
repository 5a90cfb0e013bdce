"""emu: a packet-level emulator of AI data-center backend networks (RoCEv2 fabrics)."""

from setuptools import find_packages, setup

setup(
    name="emu",
    version="0.1.0",
    description=__doc__,
    python_requires=">=3.11",
    packages=find_packages(include=["emucore*", "emu*", "topologies*", "switch_agent*", "traffic*", "collectives*"]),
    package_data={"topologies": ["presets/*.yaml"], "emucore.qos": ["presets/*.yaml"]},
    install_requires=[line.strip() for line in open("requirements.txt")
                      if line.strip() and not line.startswith("#")],
    entry_points={"console_scripts": ["emu=emu.cli:main"]},
)
