#version 450
// MoE routing on the device, as kernels/moe_route.cpp routes (the CPU backend's reference): one invocation per
// token scores its router logits (softmax, sigmoid, the logits themselves, or sqrt(softplus)), adds the
// selection bias, drops the experts of all but the best n_group_used groups (ranked by the sum of their two best
// selection scores, ties by group index), takes the n_used best (ties: the lower id) or the forced ones, and
// finishes their weights (softmax over the chosen, renormalised, scaled). The sums run in the CPU's order.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer L { float logits[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float bias[]; };
layout(std430, set = 0, binding = 2) buffer S { float scratch[]; };  // per token: scores, then selection
layout(std430, set = 0, binding = 3) buffer Ids { int ids[]; };     // forced: read as given
layout(std430, set = 0, binding = 4) buffer W { float w[]; };
layout(push_constant) uniform Params {
  uint n, n_expert, n_used, gating, n_group, n_group_used, flags;
  float scale;
  uint logits_off, bias_off, scratch_off, ids_off, w_off, groups_x;
} p;

const uint kNormalize = 1u, kByLogit = 2u, kBias = 4u, kForced = 8u;
// An expert out of the running (the CPU's -inf: a finite stand-in, as a device need not keep infinities).
const float kExcluded = -3.0e38;
const uint kSoftmax = 1u, kSigmoid = 2u, kSoftmaxWeight = 3u;

void main() {
  const uint t = gl_GlobalInvocationID.y * (p.groups_x * 64u) + gl_GlobalInvocationID.x;
  if (t >= p.n) return;
  const uint ne = p.n_expert, nu = p.n_used;
  const uint x = p.logits_off + t * ne, sc = p.scratch_off + t * 2u * ne, sel = sc + ne;
  if (p.gating == kSoftmax) {
    float m = logits[x];
    for (uint e = 1u; e < ne; e++) m = max(m, logits[x + e]);
    float sum = 0.0;
    for (uint e = 0u; e < ne; e++) {
      const float v = exp(logits[x + e] - m);
      scratch[sc + e] = v;
      sum += v;
    }
    for (uint e = 0u; e < ne; e++) scratch[sc + e] /= sum;
  } else if (p.gating == kSigmoid) {
    for (uint e = 0u; e < ne; e++) scratch[sc + e] = 1.0 / (1.0 + exp(-logits[x + e]));
  } else if (p.gating == kSoftmaxWeight) {
    for (uint e = 0u; e < ne; e++) scratch[sc + e] = logits[x + e];
  } else {
    for (uint e = 0u; e < ne; e++) {
      const float v = logits[x + e];
      scratch[sc + e] = sqrt(v > 20.0 ? v : log(1.0 + exp(v)));
    }
  }
  const uint id = p.ids_off + t * nu, wt = p.w_off + t * nu;
  if ((p.flags & kForced) != 0u) {
    for (uint k = 0u; k < nu; k++) w[wt + k] = scratch[sc + uint(ids[id + k])];
  } else {
    for (uint e = 0u; e < ne; e++)
      scratch[sel + e] = (p.flags & kByLogit) != 0u ? logits[x + e]
                                                    : scratch[sc + e] + ((p.flags & kBias) != 0u ? bias[p.bias_off + e] : 0.0);
    if (p.n_group > 1u && p.n_group_used < p.n_group) {
      const uint per_group = ne / p.n_group;
      float group_score[64];
      for (uint g = 0u; g < p.n_group; g++) {
        float best = kExcluded, second = kExcluded;
        for (uint e = g * per_group; e < (g + 1u) * per_group; e++) {
          const float v = scratch[sel + e];
          if (v > best) {
            second = best;
            best = v;
          } else if (v > second) {
            second = v;
          }
        }
        group_score[g] = per_group > 1u ? best + second : best;
      }
      // A group's rank in the CPU's stable sort (best first, ties by index): the groups ahead of it.
      for (uint g = 0u; g < p.n_group; g++) {
        uint rank = 0u;
        for (uint h = 0u; h < p.n_group; h++)
          if (group_score[h] > group_score[g] || (group_score[h] == group_score[g] && h < g)) rank++;
        if (rank >= p.n_group_used)
          for (uint e = g * per_group; e < (g + 1u) * per_group; e++) scratch[sel + e] = kExcluded;
      }
    }
    for (uint k = 0u; k < nu; k++) {
      int best = -1;
      for (uint e = 0u; e < ne; e++) {
        const float v = scratch[sel + e];
        if (v != kExcluded && (best < 0 || v > scratch[sel + uint(best)])) best = int(e);
      }
      ids[id + k] = best;
      w[wt + k] = scratch[sc + uint(best)];
      scratch[sel + uint(best)] = kExcluded;
    }
  }
  if (p.gating == kSoftmaxWeight) {  // a softmax over the chosen logits
    float m = w[wt];
    for (uint k = 1u; k < nu; k++) m = max(m, w[wt + k]);
    float sum = 0.0;
    for (uint k = 0u; k < nu; k++) {
      w[wt + k] = exp(w[wt + k] - m);
      sum += w[wt + k];
    }
    for (uint k = 0u; k < nu; k++) w[wt + k] /= sum;
  }
  if ((p.flags & kNormalize) != 0u) {
    float sum = 0.0;
    for (uint k = 0u; k < nu; k++) sum += w[wt + k];
    sum = max(sum, 6.103515625e-5);
    for (uint k = 0u; k < nu; k++) w[wt + k] /= sum;
  }
  for (uint k = 0u; k < nu; k++) w[wt + k] *= p.scale;
}
