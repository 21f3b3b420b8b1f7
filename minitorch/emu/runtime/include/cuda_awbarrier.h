#pragma once
#error "cuda_awbarrier.h (asynchronous barriers) is not supported by the emulator: this kernel needs an NVIDIA GPU (or Google Colab); cp.async with cp.async.wait_group / __pipeline_wait_prior runs on the emulator"
