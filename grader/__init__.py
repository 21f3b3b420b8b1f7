"""The MiniTorch CUDA grader: `grader check`, `grader status`, `grader labs`, and the phase gates.

Keep this import light: labs call `grader.require(...)` in their first cell.
"""

from grader.gate import PhaseLocked, require
from grader.phases import PHASES, get_phase

__all__ = ["PHASES", "PhaseLocked", "get_phase", "require"]
__version__ = "0.1.0"
