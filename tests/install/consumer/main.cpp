// Fits a linear map with the installed library on the CPU: y = x A + c with A, c known, 20 SGD
// steps on the mean squared error. Exits 0 when the loss falls below a tenth of its start and
// the fitted bias is nearer c than the start (zeros) was.
#include <meganeura/graph.h>
#include <meganeura/train.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace meganeura;

int main() {
  const int64_t n = 32, in = 3, out = 2;
  const double a[in][out] = {{0.5, -1.0}, {2.0, 0.25}, {-0.75, 1.5}};
  const double c[out] = {0.3, -0.2};
  std::vector<float> x(size_t(n * in)), y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < in; ++k) x[size_t(i * in + k)] = float(std::sin(double(3 * i + k + 1)));
    for (int64_t j = 0; j < out; ++j) {
      double v = c[j];
      for (int64_t k = 0; k < in; ++k) v += double(x[size_t(i * in + k)]) * a[k][j];
      y[size_t(i * out + j)] = float(v);
    }
  }
  const LossFn model = [&](Graph& g) {
    Tensor xs = g.input("x", {n, in});
    Tensor ys = g.input("y", {n, out});
    Tensor w = g.parameter("w", {in, out}, Init{Init::normal, 0.1});
    Tensor b = g.parameter("b", {out}, Init{Init::zeros});
    return mse(matmul(xs, w) + b, ys);
  };
  OptimizerConfig sgd;
  sgd.kind = OptimizerConfig::Kind::sgd;
  sgd.lr = 0.3;
  Trainer trainer(model, sgd, SessionOptions{.device = Device::cpu, .seed = 1});
  trainer.session().set("x", x);
  trainer.session().set("y", y);
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    last = trainer.step();
    if (step == 0) first = last;
  }
  const std::vector<float> bias = trainer.session().get("b");
  const double dist = std::hypot(bias[0] - c[0], bias[1] - c[1]), start = std::hypot(c[0], c[1]);
  std::printf("loss %g -> %g, bias (%g, %g), distance to the true bias %g (start %g)\n", first, last, bias[0], bias[1],
              dist, start);
  if (!(last < 0.1f * first) || !(dist < 0.5 * start)) {
    std::printf("FAIL: the installed library did not train\n");
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
