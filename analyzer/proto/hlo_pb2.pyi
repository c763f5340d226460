from . import xla_data_pb2 as _xla_data_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HloProto(_message.Message):
    __slots__ = ("hlo_module",)
    HLO_MODULE_FIELD_NUMBER: _ClassVar[int]
    hlo_module: HloModuleProto
    def __init__(self, hlo_module: _Optional[_Union[HloModuleProto, _Mapping]] = ...) -> None: ...

class HloModuleProto(_message.Message):
    __slots__ = ("name", "entry_computation_name", "computations", "id", "entry_computation_id", "schedule", "stack_frame_index")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_NAME_FIELD_NUMBER: _ClassVar[int]
    COMPUTATIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_COMPUTATION_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_INDEX_FIELD_NUMBER: _ClassVar[int]
    name: str
    entry_computation_name: str
    computations: _containers.RepeatedCompositeFieldContainer[HloComputationProto]
    id: int
    entry_computation_id: int
    schedule: HloScheduleProto
    stack_frame_index: StackFrameIndexProto
    def __init__(self, name: _Optional[str] = ..., entry_computation_name: _Optional[str] = ..., computations: _Optional[_Iterable[_Union[HloComputationProto, _Mapping]]] = ..., id: _Optional[int] = ..., entry_computation_id: _Optional[int] = ..., schedule: _Optional[_Union[HloScheduleProto, _Mapping]] = ..., stack_frame_index: _Optional[_Union[StackFrameIndexProto, _Mapping]] = ...) -> None: ...

class HloScheduleProto(_message.Message):
    __slots__ = ("sequences",)
    class InstructionSequence(_message.Message):
        __slots__ = ("instruction_ids",)
        INSTRUCTION_IDS_FIELD_NUMBER: _ClassVar[int]
        instruction_ids: _containers.RepeatedScalarFieldContainer[int]
        def __init__(self, instruction_ids: _Optional[_Iterable[int]] = ...) -> None: ...
    class SequencesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: HloScheduleProto.InstructionSequence
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[HloScheduleProto.InstructionSequence, _Mapping]] = ...) -> None: ...
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    sequences: _containers.MessageMap[int, HloScheduleProto.InstructionSequence]
    def __init__(self, sequences: _Optional[_Mapping[int, HloScheduleProto.InstructionSequence]] = ...) -> None: ...

class HloComputationProto(_message.Message):
    __slots__ = ("name", "instructions", "id", "root_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: _containers.RepeatedCompositeFieldContainer[HloInstructionProto]
    id: int
    root_id: int
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[HloInstructionProto, _Mapping]]] = ..., id: _Optional[int] = ..., root_id: _Optional[int] = ...) -> None: ...

class HloInstructionProto(_message.Message):
    __slots__ = ("name", "opcode", "shape", "metadata", "fusion_kind", "tuple_index", "window", "convolution_dimension_numbers", "custom_call_target", "dot_dimension_numbers", "id", "operand_ids", "called_computation_ids", "backend_config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPCODE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    FUSION_KIND_FIELD_NUMBER: _ClassVar[int]
    TUPLE_INDEX_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    CONVOLUTION_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_CALL_TARGET_FIELD_NUMBER: _ClassVar[int]
    DOT_DIMENSION_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    OPERAND_IDS_FIELD_NUMBER: _ClassVar[int]
    CALLED_COMPUTATION_IDS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    opcode: str
    shape: _xla_data_pb2.ShapeProto
    metadata: _xla_data_pb2.OpMetadata
    fusion_kind: str
    tuple_index: int
    window: _xla_data_pb2.Window
    convolution_dimension_numbers: _xla_data_pb2.ConvolutionDimensionNumbers
    custom_call_target: str
    dot_dimension_numbers: _xla_data_pb2.DotDimensionNumbers
    id: int
    operand_ids: _containers.RepeatedScalarFieldContainer[int]
    called_computation_ids: _containers.RepeatedScalarFieldContainer[int]
    backend_config: bytes
    def __init__(self, name: _Optional[str] = ..., opcode: _Optional[str] = ..., shape: _Optional[_Union[_xla_data_pb2.ShapeProto, _Mapping]] = ..., metadata: _Optional[_Union[_xla_data_pb2.OpMetadata, _Mapping]] = ..., fusion_kind: _Optional[str] = ..., tuple_index: _Optional[int] = ..., window: _Optional[_Union[_xla_data_pb2.Window, _Mapping]] = ..., convolution_dimension_numbers: _Optional[_Union[_xla_data_pb2.ConvolutionDimensionNumbers, _Mapping]] = ..., custom_call_target: _Optional[str] = ..., dot_dimension_numbers: _Optional[_Union[_xla_data_pb2.DotDimensionNumbers, _Mapping]] = ..., id: _Optional[int] = ..., operand_ids: _Optional[_Iterable[int]] = ..., called_computation_ids: _Optional[_Iterable[int]] = ..., backend_config: _Optional[bytes] = ...) -> None: ...

class StackFrameIndexProto(_message.Message):
    __slots__ = ("file_names", "function_names", "file_locations", "stack_frames")
    class FileLocation(_message.Message):
        __slots__ = ("file_name_id", "function_name_id", "line")
        FILE_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        FUNCTION_NAME_ID_FIELD_NUMBER: _ClassVar[int]
        LINE_FIELD_NUMBER: _ClassVar[int]
        file_name_id: int
        function_name_id: int
        line: int
        def __init__(self, file_name_id: _Optional[int] = ..., function_name_id: _Optional[int] = ..., line: _Optional[int] = ...) -> None: ...
    class StackFrame(_message.Message):
        __slots__ = ("file_location_id", "parent_frame_id")
        FILE_LOCATION_ID_FIELD_NUMBER: _ClassVar[int]
        PARENT_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
        file_location_id: int
        parent_frame_id: int
        def __init__(self, file_location_id: _Optional[int] = ..., parent_frame_id: _Optional[int] = ...) -> None: ...
    FILE_NAMES_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAMES_FIELD_NUMBER: _ClassVar[int]
    FILE_LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAMES_FIELD_NUMBER: _ClassVar[int]
    file_names: _containers.RepeatedScalarFieldContainer[str]
    function_names: _containers.RepeatedScalarFieldContainer[str]
    file_locations: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.FileLocation]
    stack_frames: _containers.RepeatedCompositeFieldContainer[StackFrameIndexProto.StackFrame]
    def __init__(self, file_names: _Optional[_Iterable[str]] = ..., function_names: _Optional[_Iterable[str]] = ..., file_locations: _Optional[_Iterable[_Union[StackFrameIndexProto.FileLocation, _Mapping]]] = ..., stack_frames: _Optional[_Iterable[_Union[StackFrameIndexProto.StackFrame, _Mapping]]] = ...) -> None: ...
