#pragma once
#error "mma.h (wmma/mma, cp.async, async barriers) is not supported by the emulator: this kernel needs an NVIDIA GPU (or Google Colab)"
