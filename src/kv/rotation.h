#pragma once
// Fixed randomized Hadamard rotation R = H * D / sqrt(d): D is a diagonal of +-1 signs drawn once from a
// fixed seed, H the Walsh-Hadamard matrix. R is orthonormal, so q.k == (Rq).(Rk) and R^-1 = D * H / sqrt(d).
// After R, the coordinates of any vector are close to i.i.d. N(0, |x|^2/d), which is what the
// Lloyd-Max codebooks of tq3/tq4 are fitted to, and outliers are spread over all coordinates.
// d must be a power of two (64, 128, 256 ...).
namespace kvtax::kv {

bool is_pow2(int d);
void rotate(const float* x, int d, float* y);    // y = R x   (x == y allowed)
void unrotate(const float* y, int d, float* x);  // x = R^T y (x == y allowed)
// The +-1 diagonal D (kRotationMaxDim entries; head_dim d uses the first d), for device copies of R.
constexpr int kRotationMaxDim = 1024;
const float* rotation_signs();

}  // namespace kvtax::kv
