// Thread-local red zones linked before (__emu_pad_lo) and after (__emu_pad_hi) the learner's
// module, so that the module's static __shared__ variables (thread-local storage, see prelude.h)
// sit between them: an off-by-one write lands in a pad, never in the emulator's own data or in
// the heap block glibc allocates for the module's TLS. The runtime fills the pads next to the
// variables with a canary at each block start and checks them when the block ends.
extern "C" {
__attribute__((used, visibility("hidden"))) thread_local char EMU_PAD_NAME[EMU_PAD_SIZE];
}
