"""Writes the inline-PTX wrappers of wgmma.mma_async with float accumulators, one per (element type,
N, operand form). The accumulator count (N/2 registers per thread) is part of the instruction's
operand list, so each N needs its own asm statement.

usage: python3 tools/gen/gen_wgmma.py > src/arch/sm90/wgmma_ops.cuh          (fp16/bf16, m64nNk16)
       python3 tools/gen/gen_wgmma.py fp8 > src/arch/sm90/wgmma_fp8_ops.cuh  (e4m3, m64nNk32)
"""
import sys

TYPES = {"__nv_bfloat16": "bf16", "__half": "f16"}
NS = (32, 40, 64, 80, 96, 112, 128, 144, 160, 176, 192, 256)


def accumulators(n_regs):
    return ", ".join(f"%{i}" for i in range(n_regs))


def outputs(n_regs):
    return ", ".join(f'"+f"(d[{i}])' for i in range(n_regs))


def emit(ctype, ptx_type, n):
    regs = n // 2
    ss = (
        f'template <>\nstruct Wgmma<{ctype}, {n}> {{\n'
        f'  // d (+)= A(shared) * B(shared); kTransB: B is MN-major; kTransA: A is MN-major.\n'
        f'  template <int kTransB, int kTransA = 0>\n'
        f'  __device__ __forceinline__ static void ss(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, int accumulate) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "\n'
        f'        "{{{accumulators(regs)}}}, %{regs}, %{regs + 1}, p, 1, 1, %{regs + 4}, %{regs + 3};\\n}}\\n"\n'
        f'        : {outputs(regs)}\n'
        f'        : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB), "n"(kTransA));\n'
        f'  }}\n'
        f'  // d = A(shared) * B(shared), d\'s old values unread: as ss with accumulate 0, but the\n'
        f'  // compiler sees d written, not read (no old values kept live for it).\n'
        f'  template <int kTransB, int kTransA = 0>\n'
        f'  __device__ __forceinline__ static void ss_first(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "\n'
        f'        "{{{accumulators(regs)}}}, %{regs}, %{regs + 1}, p, 1, 1, %{regs + 4}, %{regs + 3};\\n}}\\n"\n'
        f'        : {outputs(regs).replace("+f", "=f")}\n'
        f'        : "l"(desc_a), "l"(desc_b), "r"(0), "n"(kTransB), "n"(kTransA));\n'
        f'  }}\n'
        f'  // d (+)= A(registers: the mma.m16n8k16 A fragment of this warp\'s 16 rows) * B(shared).\n'
        f'  template <int kTransB>\n'
        f'  __device__ __forceinline__ static void rs(float (&d)[{regs}], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "\n'
        f'        "{{{accumulators(regs)}}}, {{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1, %{regs + 6};\\n}}\\n"\n'
        f'        : {outputs(regs)}\n'
        f'        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB));\n'
        f'  }}\n'
        f'}};\n'
    )
    return ss


# e4m3 x e4m3: K = 32 per instruction, both operands K-major (the instruction has no transpose
# immediates for 8-bit types), A from shared memory or from registers (four .b32 of four e4m3 each).
NS_FP8 = (32, 64, 96, 128, 160, 192, 224, 256)


def emit_fp8(n):
    regs = n // 2
    return (
        f'template <>\nstruct WgmmaE4m3<{n}> {{\n'
        f'  // d (+)= A(shared) * B(shared), both K-major.\n'
        f'  __device__ __forceinline__ static void ss(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, int accumulate) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "\n'
        f'        "{{{accumulators(regs)}}}, %{regs}, %{regs + 1}, p, 1, 1;\\n}}\\n"\n'
        f'        : {outputs(regs)}\n'
        f'        : "l"(desc_a), "l"(desc_b), "r"(accumulate));\n'
        f'  }}\n'
        f'  // d = A(shared) * B(shared), d\'s old values unread (as Wgmma::ss_first).\n'
        f'  __device__ __forceinline__ static void ss_first(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "\n'
        f'        "{{{accumulators(regs)}}}, %{regs}, %{regs + 1}, p, 1, 1;\\n}}\\n"\n'
        f'        : {outputs(regs).replace("+f", "=f")}\n'
        f'        : "l"(desc_a), "l"(desc_b), "r"(0));\n'
        f'  }}\n'
        f'  // d (+)= A(registers: the m16n8k32 8-bit A fragment of this warp\'s 16 rows) * B(shared, K-major).\n'
        f'  __device__ __forceinline__ static void rs(float (&d)[{regs}], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {{\n'
        f'    asm volatile(\n'
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 "\n'
        f'        "{{{accumulators(regs)}}}, {{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}, %{regs + 4}, p, 1, 1;\\n}}\\n"\n'
        f'        : {outputs(regs)}\n'
        f'        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));\n'
        f'  }}\n'
        f'}};\n'
    )


def main_fp8():
    print("// Generated by tools/gen/gen_wgmma.py fp8: do not edit by hand.")
    print("// wgmma.mma_async m64nNk32 e4m3 x e4m3, float accumulators, for the N sizes the fp8 attention")
    print("// tiles use. Both operands K-major; A from shared memory (ss) or from registers (rs).")
    print("#pragma once\n")
    print("#include <cstdint>\n")
    print("namespace flashattn::sm90 {\n")
    print("template <int N>\nstruct WgmmaE4m3;\n")
    for n in NS_FP8:
        print(emit_fp8(n))
    print("}  // namespace flashattn::sm90")


def main():
    print("// Generated by tools/gen/gen_wgmma.py: do not edit by hand.")
    print("// wgmma.mma_async m64nNk16, float accumulators, for the N sizes the attention tiles use.")
    print("#pragma once\n")
    print("#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n\n#include <cstdint>\n")
    print("namespace flashattn::sm90 {\n")
    print("template <typename Element, int N>\nstruct Wgmma;\n")
    for ctype, ptx_type in TYPES.items():
        for n in NS:
            print(emit(ctype, ptx_type, n))
    print("}  // namespace flashattn::sm90")


if __name__ == "__main__":
    if sys.argv[1:] == ["fp8"]:
        main_fp8()
    elif sys.argv[1:]:
        sys.exit("usage: gen_wgmma.py [fp8]")
    else:
        main()
