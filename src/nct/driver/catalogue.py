"""Which driver files belong to which capability: upstream's lists (libnvidia-container
nvc_info.c and the toolkit's discoverers), kept in one place for discovery and the simulator."""

from __future__ import annotations

# Libraries, selected by the NVIDIA_DRIVER_CAPABILITIES value that asks for them.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": (
        "libcuda.so", "libcudadebugger.so", "libnvidia-opencl.so", "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so", "libnvidia-fatbinaryloader.so", "libnvidia-allocator.so",
        "libnvidia-compiler.so", "libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so", "libnvidia-tileiras.so",
    ),
    "video": ("libvdpau_nvidia.so", "libnvidia-encode.so", "libnvidia-opticalflow.so", "libnvcuvid.so"),
    "graphics": (
        "libnvidia-eglcore.so", "libnvidia-glcore.so", "libnvidia-tls.so", "libnvidia-glsi.so",
        "libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-rtcore.so", "libnvoptix.so",
        # glvnd vendor libraries
        "libGLX_nvidia.so", "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so", "libnvidia-cbl.so",
    ),
    "ngx": ("libnvidia-ngx.so",),
}

# What each capability flag pulls in (upstream: video also brings compute libs, display
# brings graphics libs).
CAPABILITY_LIBRARY_SETS: dict[str, tuple[str, ...]] = {
    "utility": ("utility",),
    "compute": ("compute",),
    "video": ("video", "compute"),
    "graphics": ("graphics",),
    "display": ("graphics",),
    "ngx": ("ngx",),
    "compat32": (),
}

BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}

# IPC endpoints: (host path candidates, capability that exposes them).
IPCS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"), "utility"),
    (("/run/nvidia-fabricmanager/socket", "/var/run/nvidia-fabricmanager/socket"), "utility"),
    (("/tmp/nvidia-mps",), "compute"),
)

# Graphics / Vulkan / EGL configuration files (container path = host path under /usr/share or /etc).
GRAPHICS_CONFIGS: tuple[str, ...] = (
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
    "/usr/share/egl/egl_external_platform.d/09_nvidia_wayland2.json",
    "/usr/share/egl/egl_external_platform.d/20_nvidia_xcb.json",
    "/usr/share/egl/egl_external_platform.d/20_nvidia_xlib.json",
    "/usr/share/nvidia/nvoptix.bin",
    "/usr/share/X11/xorg.conf.d/10-nvidia.conf",
    "/usr/share/X11/xorg.conf.d/nvidia-drm-outputclass.conf",
    "/etc/OpenCL/vendors/nvidia.icd",
    "/etc/vulkan/icd.d/nvidia_icd.json",
    "/etc/vulkan/icd.d/nvidia_layers.json",
    "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
)

# Graphics libraries found by glob in the driver lib dirs (not version-suffixed by NVRM).
GRAPHICS_EXTRA_LIBRARIES: tuple[str, ...] = (
    "libnvidia-egl-gbm.so", "libnvidia-egl-wayland.so", "libnvidia-egl-wayland2.so",
    "libnvidia-egl-xcb.so", "libnvidia-egl-xlib.so",
)

# GSP firmware lives at <dir>/nvidia/<version>/gsp*.bin, dirs searched in this order.
FIRMWARE_DIRS: tuple[str, ...] = (
    "/lib/firmware/updates", "/lib/firmware",
)

# SONAME major of each library (what the real driver ships): name.so -> name.so.<major>.
# Everything not listed has SONAME major 1.
SONAME_MAJOR: dict[str, str] = {
    "libGLX_nvidia.so": "0",
    "libEGL_nvidia.so": "0",
    "libGLESv2_nvidia.so": "2",
    "libGLESv1_CM_nvidia.so": "1",
    "libnvidia-ml.so": "1",
    "libnvidia-tls.so": "",  # versioned SONAME: libnvidia-tls.so.<driver version>
    "libnvidia-glcore.so": "",
    "libnvidia-eglcore.so": "",
    "libnvidia-glsi.so": "",
    "libnvidia-rtcore.so": "",
    "libnvidia-cbl.so": "",
    "libnvidia-glvkspirv.so": "",
    "libnvidia-gpucomp.so": "",
    "libnvidia-compiler.so": "",
    "libnvidia-nvvm.so": "4",
    "libnvidia-cfg.so": "1",
    "libnvidia-nscq.so": "",
    "libnvidia-pkcs11.so": "",
    "libnvidia-pkcs11-openssl3.so": "",
    "libcudadebugger.so": "1",
    "libnvidia-tileiras.so": "",
}


def soname_for(name: str, driver_version: str) -> str:
    """The SONAME the real driver gives library `name` (e.g. libcuda.so -> libcuda.so.1)."""
    major = SONAME_MAJOR.get(name, "1")
    return f"{name}.{major or driver_version}"


def all_library_names() -> list[str]:
    """Every catalogued library name, capability order, no duplicates."""
    seen: list[str] = []
    for names in LIBRARIES.values():
        seen.extend(n for n in names if n not in seen)
    return seen


def capability_of_library(name: str) -> str | None:
    for cap, names in LIBRARIES.items():
        if name in names:
            return cap
    return None
