"""Domain errors. Every error a user can cause is an NctError whose str() is one line
naming the file, key or device at fault; front ends print it and exit non-zero."""

from __future__ import annotations


class NctError(Exception):
    """Base of every user-facing error: the message is printed as is, on one line."""

    def __str__(self) -> str:  # keep messages on one line whatever was passed in
        return " ".join(str(self.args[0] if self.args else "").split())


class ConfigError(NctError):
    """Invalid config.toml (syntax, type, unknown value)."""


class DiscoveryError(NctError):
    """The node's driver state cannot be read (no driver, garbage in a proc file, corrupt cache)."""


class RequestError(NctError):
    """The container asks for something invalid: unknown device, unsupported capability."""


class RequirementError(NctError):
    """An NVIDIA_REQUIRE_* condition is not met, or does not parse."""


class SpecError(NctError):
    """A bundle config.json or CDI spec that cannot be read or is invalid."""


class ContainerError(NctError):
    """Configuring a live container failed (hostile path, mount refused, cgroup write failed)."""


class EngineConfigError(NctError):
    """An engine configuration file (daemon.json, containerd/CRI-O TOML) cannot be edited."""
