// brgemm on fa4's own avx512 / AMX panels (no re-packing), one thread, against fa4's kernels on
// the same panels (bench/cpu_brgemm_ab.sh builds and runs it after cpu_brgemm_ab):
//   S^T = K Q^T:    A = kb [nk][dqk] (lda = dqk), B = qv VNNI [dqk/2][mp][2] (ldb = mp), C = st (ldc = mp)
//   O^T += V^T P^T: A = vt [dv][nk]  (lda = nk),  B = pp VNNI [nk/2][mp][2]  (ldb = mp), C = ot (ldc = mp)
// Prints max |fa4 - brgemm| / max |fa4| and best-of-7 GFLOP/s of each.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "cpu/cpu_kernels.h"
#include "oneapi/dnnl/dnnl_ukernel.hpp"
using namespace fa4::core::cpu;
namespace uk = dnnl::ukernel;
using dt = dnnl::memory::data_type;
static uint16_t bf(float x){uint32_t u;std::memcpy(&u,&x,4);u+=0x7fff+((u>>16)&1);return u>>16;}
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(){
  const LowpKernels& L = *avx512_kernels(true).lowp_bf16;
  std::mt19937 rng(1); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud;
  for (int64_t M : {192, 96}) for (int64_t NK : {32, 512}) for (int64_t D : {64, 128, 256}) {
    std::vector<uint16_t> v(NK*D); for (auto& x : v) x = bf(nd(rng));
    std::vector<const void*> vr(NK); for (int64_t j=0;j<NK;++j) vr[j]=&v[j*D];
    std::vector<uint16_t> vt(D*NK), pp(NK*M*2); std::vector<float> pt(NK*M), ot1(D*M,0), ot2(D*M,0), al(M,1);
    for (auto& x : pt) x = ud(rng);
    L.pack_v(vr.data(), fa4::DType::bfloat16, NK, D, 1, vt.data());
    pack_p_avx512(pt.data(), M, M, NK, 1, pp.data());
    {
      std::vector<uint16_t> q(M*D), k(NK*D), qv(D*M), kb(NK*D); std::vector<float> st1((NK+16)*M), st2(NK*M);
      for (auto& x : q) x = bf(nd(rng)); for (auto& x : k) x = bf(nd(rng));
      std::vector<const void*> qr(M), kr(NK); for (int64_t i=0;i<M;++i) qr[i]=&q[i*D]; for (int64_t j=0;j<NK;++j) kr[j]=&k[j*D];
      L.pack_q_rows(qr.data(), fa4::DType::bfloat16, M, M, D, 1.0f, 1, qv.data());
      L.pack_k(kr.data(), fa4::DType::bfloat16, NK, D, 1, kb.data());
      uk::brgemm s(NK, M, D, 1, D, M, M, dt::bf16, dt::bf16, dt::f32, true);
      s.set_add_C(false);
      if (!s || !s.finalize()) { std::printf("S^T M %ld NK %ld D %ld: brgemm not created\n", M, NK, D); }
      else {
        s.generate();
        std::vector<uint8_t> scr(s.get_scratchpad_size() + 64);
        const std::vector<std::pair<dnnl::memory::dim, dnnl::memory::dim>> off{{0,0}};
        L.qk(qv.data(), M, M, D, kb.data(), NK, NK, 1, 1.0f, st1.data());
        s.set_hw_context(); s.execute(kb.data(), qv.data(), off, st2.data(), scr.data());
        double e=0, r=0; for (size_t i=0;i<st2.size();++i){e=std::fmax(e,std::fabs(st1[i]-st2[i]));r=std::fmax(r,std::fabs(st1[i]));}
        double best1=1e9,best2=1e9; int reps = 200000/(NK*D/64);
        for (int rd=0; rd<7; ++rd) {
          double t0=now(); for(int i=0;i<reps;++i) L.qk(qv.data(), M, M, D, kb.data(), NK, NK, 1, 1.0f, st1.data()); best1=std::fmin(best1,(now()-t0)/reps);
          t0=now(); for(int i=0;i<reps;++i) s.execute(kb.data(), qv.data(), off, st2.data(), scr.data()); best2=std::fmin(best2,(now()-t0)/reps);
        }
        const double fl = 2.0*M*NK*D;
        std::printf("S^T on fa4 panels rows %ld keys %ld D %ld: max diff/max %.1e; fa4 qk %.0f GFLOP/s, brgemm(A=kb, B=qv, ldb=%ld) %.0f GFLOP/s, ratio %.2f\n", M, NK, D, e/r, fl/best1/1e9, M, fl/best2/1e9, best1/best2);
      }
    }
    uk::brgemm b(D, M, NK, 1, NK, M, M, dt::bf16, dt::bf16, dt::f32, true);
    if (!b) { std::printf("M %ld NK %ld D %ld: brgemm create failed\n", M, NK, D); continue; }
    b.set_add_C(true);
    if (!b.finalize()) { std::printf("M %ld NK %ld D %ld: finalize failed (ldb = %ld)\n", M, NK, D, M); continue; }
    b.generate();
    std::vector<uint8_t> scr(b.get_scratchpad_size() + 64);
    const std::vector<std::pair<dnnl::memory::dim, dnnl::memory::dim>> off{{0,0}};
    L.pv(nullptr, M, M, NK, vt.data(), NK, D, 1, al.data(), pp.data(), ot1.data());
    b.set_hw_context(); b.execute(vt.data(), pp.data(), off, ot2.data(), scr.data());
    double e=0, r=0; for (size_t i=0;i<ot1.size();++i){e=std::fmax(e,std::fabs(ot1[i]-ot2[i]));r=std::fmax(r,std::fabs(ot1[i]));}
    double best1=1e9,best2=1e9; int reps = 200000/(NK*D/64);
    for (int rd=0; rd<7; ++rd) {
      double t0=now(); for(int i=0;i<reps;++i) L.pv(nullptr, M, M, NK, vt.data(), NK, D, 1, al.data(), pp.data(), ot1.data()); best1=std::fmin(best1,(now()-t0)/reps);
      t0=now(); for(int i=0;i<reps;++i) b.execute(vt.data(), pp.data(), off, ot2.data(), scr.data()); best2=std::fmin(best2,(now()-t0)/reps);
    }
    const double fl = 2.0*M*NK*D;
    std::printf("O^T on fa4 panels rows %ld keys %ld D %ld: max diff/max %.1e; fa4 pv %.0f GFLOP/s, brgemm(A=vt, B=pp, ldb=%ld) %.0f GFLOP/s, ratio %.2f\n", M, NK, D, e/r, fl/best1/1e9, M, fl/best2/1e9, best1/best2);
  }
}
