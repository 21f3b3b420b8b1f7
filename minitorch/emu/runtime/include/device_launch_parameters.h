// Provided by the emulator prelude (minitorch/emu/runtime/prelude.h).
#pragma once
