from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class OpMetadata(_message.Message):
    __slots__ = ("op_type", "op_name", "source_file", "source_line", "stack_frame_id")
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    OP_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FILE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_LINE_FIELD_NUMBER: _ClassVar[int]
    STACK_FRAME_ID_FIELD_NUMBER: _ClassVar[int]
    op_type: str
    op_name: str
    source_file: str
    source_line: int
    stack_frame_id: int
    def __init__(self, op_type: _Optional[str] = ..., op_name: _Optional[str] = ..., source_file: _Optional[str] = ..., source_line: _Optional[int] = ..., stack_frame_id: _Optional[int] = ...) -> None: ...
