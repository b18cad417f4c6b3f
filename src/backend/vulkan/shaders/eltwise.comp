#version 450
// The element-wise operators, one invocation per element of x (op picks which):
//   0 add:       x[i] += y[i]
//   1 silu_mul:  x[i] = silu(x[i]) * y[i]
//   2 gelu_mul:  x[i] = gelu(x[i]) * y[i], GELU read from ggml's fp16 table (ops.h gelu_mul), bound as y2
//   3 scale:     x[i] *= a
//   4 softcap:   x[i] = a * tanh(x[i] / a)
//   5 add_bias:  x[i] += y[i % dim]
//   6 fill:      x[i] = a
//   7 copy rows: x[(i / dim) * x_stride + i % dim] = y[(i / dim) * y_stride + i % dim]
//   8 gather:    x[i] = y[rows[i / dim] * dim + i % dim], rows the words of binding 2 from x_stride on
//   9 swiglu_clamp: g = min(x[i], a), u = clamp(y[i], -a, a); x[i] = silu(g) * u (ops.h swiglu_clamp)
//  10 swiglu_oai:   g = min(x[i], a), u = clamp(y[i], -a, a); x[i] = g * sigmoid(b * g) * (u + 1) (gpt-oss)
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer T { uint gelu_table[]; };
layout(push_constant) uniform Params {
  uint op, n, x_off, y_off, dim, x_stride, y_stride;
  float a, b;
} p;

float half_rounded(float v) { return unpackHalf2x16(packHalf2x16(vec2(v, 0.0))).x; }

void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= p.n) return;
  const uint xi = p.x_off + i, yi = p.y_off + i;
  switch (p.op) {
    case 0u: x[xi] += y[yi]; break;
    case 1u: { const float g = x[xi]; x[xi] = g / (1.0 + exp(-g)) * y[yi]; break; }
    case 2u: {
      const float g = x[xi];
      if (g <= -10.0) x[xi] = 0.0;
      else if (g >= 10.0) x[xi] = g * y[yi];
      else {
        const uint h = packHalf2x16(vec2(g, 0.0)) & 0xffffu;
        const uint word = gelu_table[h >> 1];
        x[xi] = unpackHalf2x16((h & 1u) != 0u ? word >> 16 : word & 0xffffu).x * y[yi];
      }
      break;
    }
    case 3u: x[xi] *= p.a; break;
    case 4u: x[xi] = p.a * tanh(x[xi] / p.a); break;
    case 5u: x[xi] += y[p.y_off + i % p.dim]; break;
    case 6u: x[xi] = p.a; break;
    case 7u: x[p.x_off + (i / p.dim) * p.x_stride + i % p.dim] = y[p.y_off + (i / p.dim) * p.y_stride + i % p.dim]; break;
    case 8u: x[xi] = y[p.y_off + gelu_table[p.x_stride + i / p.dim] * p.dim + i % p.dim]; break;
    case 9u: {
      const float g = min(x[xi], p.a), u = clamp(y[yi], -p.a, p.a);
      x[xi] = g / (1.0 + exp(-g)) * u;
      break;
    }
    case 10u: {
      const float g = min(x[xi], p.a), u = clamp(y[yi], -p.a, p.a);
      x[xi] = g / (1.0 + exp(p.b * -g)) * (u + 1.0);
      break;
    }
  }
}
