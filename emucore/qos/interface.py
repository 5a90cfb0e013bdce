"""Per-interface PFC features: `priority-flow-control mode`, `watch-dog` and its timers,
the classification binding (book ch.11, Examples 11-5 and 11-7).

`Watchdog` configures the stage `switch_agent.watchdog.PfcWatchdog` (SONiC's detection /
mitigation / restoration); `InterfaceQos` is one port's block.
"""

from __future__ import annotations

from dataclasses import dataclass

from emucore.qos.fields import duration, flag, normalise, one_of

PFC_MODES = ("auto", "on", "off")
WATCHDOG_ACTIONS = ("drop", "forward")


@dataclass(frozen=True)
class Watchdog:
    """PFC watchdog (Example 11-5): a no-drop queue paused, with frames waiting, for
    detect_s is declared stormed; after restore_s without pauses it is restored."""

    enabled: bool = True
    detect_s: float = 0.2  # model seconds (SONiC's default detection time)
    restore_s: float = 0.2  # model seconds
    action: str = "drop"  # drop the paused queue's frames | forward them ignoring pauses

    def __post_init__(self) -> None:
        flag("enabled", self.enabled)
        normalise(self, "detect_s", duration("detect_s", self.detect_s))
        normalise(self, "restore_s", duration("restore_s", self.restore_s))
        one_of("action", self.action, WATCHDOG_ACTIONS)


@dataclass(frozen=True)
class InterfaceQos:
    """Per-port settings (Example 11-7)."""

    pfc_mode: str = "auto"  # priority-flow-control mode auto|on|off
    watchdog: bool = True  # priority-flow-control watch-dog
    classify: bool = True  # service-policy type qos input <classification>

    def __post_init__(self) -> None:
        one_of("pfc_mode", self.pfc_mode, PFC_MODES)
        flag("watchdog", self.watchdog)
        flag("classify", self.classify)
