"""Devices and memory as onnxruntime's Python API names them: ``OrtDevice``, ``OrtMemoryInfo``,
``OrtArenaCfg`` and their enums, for the CPU that dynashape runs on.

One :class:`OrtDevice` class serves both of onnxruntime's layers: the binding's
``C.OrtDevice(device_type, mem_type, device_id)`` (with ``C.OrtDevice.cpu()``,
``C.OrtDevice.default_memory()``, ...) and the Python wrapper's ``OrtDevice.make("cpu", 0)``.
Devices other than the CPU can be named (onnxruntime's scripts build them to ask what is
available) but no value can live on them: making an OrtValue, a binding or a sparse tensor
there raises :class:`~dynashape.errors.DeviceNotAvailableError`.

Source: onnxruntime's Python API reference (https://onnxruntime.ai/docs/api/python/api_summary.html,
"Data on devices") and ``onnxruntime/core/framework/ortdevice.h`` for the numeric values.
"""
from __future__ import annotations

import enum
from typing import Any, Optional, Union

from .errors import DeviceNotAvailableError, InvalidArgumentError

__all__ = ["OrtDevice", "OrtDeviceVendorId", "OrtMemType", "OrtAllocatorType", "OrtDeviceMemoryType",
           "OrtMemoryInfoDeviceType", "OrtMemoryInfo", "OrtArenaCfg", "create_and_register_allocator",
           "create_and_register_allocator_v2", "CPU_DEVICE", "device_type_of", "cpu_device"]


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids of ``OrtDevice`` (``OrtDevice::VendorIds`` in ortdevice.h)."""

    NONE = 0x0000
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


#: device type numbers (ortdevice.h ``OrtDevice::CPU`` ...) and the names ``device_name()`` gives
_CPU, _GPU, _FPGA, _NPU, _DML = 0, 1, 2, 3, 4
_TYPE_OF_NAME = {"cpu": _CPU, "cuda": _GPU, "gpu": _GPU, "webgpu": _GPU, "dml": _DML, "cann": _NPU, "npu": _NPU}
_VENDOR_OF_NAME = {"cuda": OrtDeviceVendorId.NVIDIA, "dml": OrtDeviceVendorId.MICROSOFT,
                   "cann": OrtDeviceVendorId.HUAWEI, "webgpu": OrtDeviceVendorId.NONE}
_NAME_OF_TYPE = {_CPU: "cpu", _GPU: "gpu", _FPGA: "fpga", _NPU: "npu", _DML: "dml"}


def device_type_of(name: str) -> int:
    """The ``OrtDevice`` type number of a device name (``"cpu"`` -> 0, ``"cuda"`` -> 1, ...).

    Raises:
        InvalidArgumentError: an unknown name ("Unsupported device type: foo", as onnxruntime).
    """
    try:
        return _TYPE_OF_NAME[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(f"Unsupported device type: {name}") from None


class OrtDevice:
    """A device: type (0 CPU, 1 GPU, 2 FPGA, 3 NPU; 4, DirectML, is kept as a GPU of vendor
    Microsoft, as onnxruntime does), memory type, vendor id and index.

    ``OrtDevice(device_type, mem_type, device_id)`` or ``OrtDevice(device_type, mem_type,
    vendor_id, device_id)`` as onnxruntime's binding class; ``OrtDevice.make("cpu", 0)`` as its
    Python wrapper. Equality compares all four numbers.
    """

    __slots__ = ("_type", "_mem", "_vendor", "_id")
    _type: int
    _mem: int
    _vendor: int
    _id: int

    def __init__(self, device_type: Union[int, "OrtDevice"] = _CPU, mem_type: int = 0, *ids: int) -> None:
        if isinstance(device_type, OrtDevice):   # the Python wrapper's OrtDevice(c_device)
            self._type, self._mem, self._vendor, self._id = (device_type._type, device_type._mem,
                                                             device_type._vendor, device_type._id)
            return
        if len(ids) > 2:
            raise InvalidArgumentError(f"OrtDevice takes (device_type, mem_type, [vendor_id,] device_id), got "
                                       f"{2 + len(ids)} arguments")
        vendor, dev = (ids if len(ids) == 2 else (0, ids[0] if ids else 0))
        kind = int(device_type)
        if kind == _DML:    # onnxruntime keeps DirectML as a GPU of Microsoft's
            kind, vendor = _GPU, OrtDeviceVendorId.MICROSOFT
        self._type, self._mem, self._vendor, self._id = kind, int(mem_type), int(vendor), int(dev)

    # onnxruntime's binding: device type numbers and the default memory type
    @staticmethod
    def cpu() -> int:
        return _CPU

    @staticmethod
    def cuda() -> int:
        return _GPU

    @staticmethod
    def gpu() -> int:
        return _GPU

    @staticmethod
    def webgpu() -> int:
        return _GPU

    @staticmethod
    def fpga() -> int:
        return _FPGA

    @staticmethod
    def npu() -> int:
        return _NPU

    @staticmethod
    def cann() -> int:
        return _NPU

    @staticmethod
    def dml() -> int:
        return _DML

    @staticmethod
    def default_memory() -> int:
        return 0

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> "OrtDevice":
        """The device named ``"cpu"``, ``"cuda"``, ``"dml"``, ... with index ``device_id``
        (the named vendor's id unless ``vendor_id`` is given).

        Raises:
            InvalidArgumentError: an unknown device name.
        """
        kind = device_type_of(ort_device_name)
        if vendor_id < 0:
            vendor_id = int(_VENDOR_OF_NAME.get(ort_device_name, 0))
        return OrtDevice(kind, 0, int(vendor_id), int(device_id))

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def mem_type(self) -> int:
        return self._mem

    def vendor_id(self) -> int:
        return self._vendor

    # the Python wrapper's names
    device_mem_type = mem_type
    device_vendor_id = vendor_id

    def _get_c_device(self) -> "OrtDevice":
        return self

    @property
    def name(self) -> str:
        """``"cpu"``, ``"cuda"`` (a GPU of NVIDIA), ``"gpu"``, ``"dml"``, ``"npu"``, ``"fpga"``."""
        if self._type == _GPU and self._vendor == OrtDeviceVendorId.NVIDIA:
            return "cuda"
        if self._type == _GPU and self._vendor == OrtDeviceVendorId.MICROSOFT:
            return "dml"
        return _NAME_OF_TYPE.get(self._type, f"device{self._type}")

    @property
    def is_cpu(self) -> bool:
        return self._type == _CPU

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OrtDevice):
            return NotImplemented
        return (self._type, self._mem, self._vendor, self._id) == (other._type, other._mem, other._vendor, other._id)

    def __hash__(self) -> int:
        return hash((self._type, self._mem, self._vendor, self._id))

    def __repr__(self) -> str:
        return f"OrtDevice({self.name}, mem_type={self._mem}, vendor_id={self._vendor}, device_id={self._id})"


CPU_DEVICE = OrtDevice(_CPU, 0, 0)


def cpu_device(device: Any, device_id: int = 0, what: str = "an OrtValue") -> OrtDevice:
    """The CPU device that ``device`` (an :class:`OrtDevice` or a name such as ``"cpu"``) names.

    Raises:
        InvalidArgumentError: an unknown device name.
        DeviceNotAvailableError: any device but the CPU.
    """
    dev = device if isinstance(device, OrtDevice) else OrtDevice.make(device, device_id)
    if not dev.is_cpu:
        raise DeviceNotAvailableError(f"cannot place {what} on device '{dev.name}' (id {dev.device_id()}): "
                                      "dynashape runs on the CPU only")
    return dev


class OrtMemType(enum.IntEnum):
    """onnxruntime's memory types (``CPU`` is ``CPU_OUTPUT``)."""

    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtAllocatorType(enum.IntEnum):
    """onnxruntime's allocator kinds."""

    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtDeviceMemoryType(enum.IntEnum):
    """onnxruntime's device memory types."""

    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    """onnxruntime's memory-info device types."""

    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


#: the memory names ``OrtMemoryInfo`` takes (onnxruntime's allocator names)
MEMORY_NAMES = frozenset({"Cpu", "Cuda", "CudaPinned", "Cann", "CannPinned", "DML", "Hip", "HipPinned",
                          "OpenVINO_CPU", "OpenVINO_GPU", "WebGPU_Buffer"})


class OrtMemoryInfo:
    """Where an allocator's memory lives: ``OrtMemoryInfo("Cpu", allocator_type, device_id,
    mem_type)``. Any of onnxruntime's memory names can be described; only ``"Cpu"`` memory
    can hold values or get an allocator here.

    Raises:
        DeviceNotAvailableError: a name onnxruntime does not know ("Specified device is not supported").
    """

    def __init__(self, name: str, allocator_type: OrtAllocatorType, device_id: int, mem_type: OrtMemType) -> None:
        if name not in MEMORY_NAMES:
            raise DeviceNotAvailableError(f"Specified device is not supported: OrtMemoryInfo '{name}' (known: "
                                          f"{sorted(MEMORY_NAMES)})")
        self.name = name
        self.allocator_type = OrtAllocatorType(allocator_type)
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(mem_type)
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = 0

    def __repr__(self) -> str:
        return (f"OrtMemoryInfo({self.name!r}, {self.allocator_type.name}, device_id={self.device_id}, "
                f"mem_type={self.mem_type.name})")


_ARENA_FIELDS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk",
                 "initial_growth_chunk_size_bytes", "max_power_of_two_extend_bytes")


class OrtArenaCfg:
    """An arena's configuration: ``OrtArenaCfg(max_mem, arena_extend_strategy,
    initial_chunk_size_bytes, max_dead_bytes_per_chunk)`` or ``OrtArenaCfg({"max_mem": ...})``;
    fields not given are -1 (onnxruntime's "default"). Kept as given: dynashape's arena is
    planned per input signature (docs/MEMORY.md), not grown by these rules.

    Raises:
        InvalidArgumentError: an unknown key ("Invalid OrtArenaCfg option: ...").
    """

    def __init__(self, *args: Any) -> None:
        for name in _ARENA_FIELDS:
            setattr(self, name, -1)
        if len(args) == 1 and isinstance(args[0], dict):
            for key, value in args[0].items():
                if key not in _ARENA_FIELDS:
                    raise InvalidArgumentError(f"Invalid OrtArenaCfg option: {key}")
                setattr(self, key, int(value))
        elif len(args) == 4:
            for name, value in zip(_ARENA_FIELDS, args):
                setattr(self, name, int(value))
        elif args:
            raise InvalidArgumentError("OrtArenaCfg takes (max_mem, arena_extend_strategy, initial_chunk_size_bytes, "
                                       f"max_dead_bytes_per_chunk) or a dict, got {len(args)} arguments")

    def __repr__(self) -> str:
        return "OrtArenaCfg(" + ", ".join(f"{n}={getattr(self, n)}" for n in _ARENA_FIELDS) + ")"


#: allocators registered with the environment: (provider, memory info, arena config)
registered_allocators: list[tuple[str, OrtMemoryInfo, Optional[OrtArenaCfg]]] = []


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: Optional[OrtArenaCfg]) -> None:
    """Register a shared CPU allocator (onnxruntime: sessions with the config entry
    ``session.use_env_allocators = 1`` share it). Recorded; every dynashape session plans its
    own arena, so sessions are unchanged.

    Raises:
        InvalidArgumentError: ``mem_info`` is not an OrtMemoryInfo.
    """
    create_and_register_allocator_v2("CPUExecutionProvider", mem_info, {}, arena_cfg)


def create_and_register_allocator_v2(provider_type: str, mem_info: OrtMemoryInfo, options: dict,
                                     arena_cfg: Optional[OrtArenaCfg]) -> None:
    """As :func:`create_and_register_allocator`, for a provider by name.

    Raises:
        InvalidArgumentError: ``mem_info`` is not an OrtMemoryInfo or ``arena_cfg`` not an OrtArenaCfg.
        DeviceNotAvailableError: a provider other than the CPU one, or memory other than "Cpu".
    """
    if not isinstance(mem_info, OrtMemoryInfo):
        raise InvalidArgumentError(f"mem_info must be an OrtMemoryInfo, got {type(mem_info).__name__}")
    if arena_cfg is not None and not isinstance(arena_cfg, OrtArenaCfg):
        raise InvalidArgumentError(f"arena_cfg must be an OrtArenaCfg or None, got {type(arena_cfg).__name__}")
    if provider_type != "CPUExecutionProvider" or mem_info.name != "Cpu":
        raise DeviceNotAvailableError(f"cannot register an allocator for '{provider_type}' ('{mem_info.name}' "
                                      "memory): dynashape runs on the CPU only")
    registered_allocators.append((provider_type, mem_info, arena_cfg))
