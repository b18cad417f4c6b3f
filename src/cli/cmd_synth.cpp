// kestrel synth --arch llama --preset 1b --type q4_0 -o FILE.gguf
#include <fmt/format.h>

#include <chrono>

#include "cli/commands.h"
#include "formats/block_formats.h"
#include "core/error.h"
#include "model/family.h"
#include "model/control_vector.h"
#include "model/lora.h"
#include "model/synth.h"
#include "mmproj/mmproj.h"
#include "runtime/loaded_model.h"

namespace kestrel::cli {

void register_synth(CLI::App& app) {
  static std::string arch = "llama", preset = "tiny", type_str = "f16", out, vocab_from, mtp_file, mmproj,
                     mmproj_preset = "tiny", mmproj_type = "f32", mmproj_projector;
  static int64_t mmproj_layers = 0;
  static int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0, mtp = -1, top_k = 0,
                 shared_kv = -1;
  static uint64_t seed = 1;
  static int threads = 0;
  static std::string lora_out, lora_type = "f32", lora_only;
  static SynthLoraOptions lora;
  static uint64_t lora_seed = 0;
  static bool lora_no_head = false;
  static std::string cvec_out;
  static float cvec_std = 0.5f;
  static uint64_t cvec_seed = 0;
  auto* cmd = add_command(app, "synth", "Write a random-weight GGUF of a chosen architecture and shape", [] {
    const auto t0 = std::chrono::steady_clock::now();
    SynthOptions o;
    o.shape = synth_preset(arch, preset);
    for (auto [flag, value] : {std::pair{&o.shape.dim, dim}, {&o.shape.layers, layers}, {&o.shape.heads, heads},
                               {&o.shape.kv_heads, kv_heads}, {&o.shape.ffn, ffn}, {&o.shape.vocab, vocab},
                               {&o.shape.ctx, ctx}})
      if (value != 0) *flag = value;
    if (heads != 0 && kv_heads == 0) o.shape.kv_heads = std::min(o.shape.kv_heads, heads);
    if (mtp >= 0) o.shape.ds.nextn = mtp;
    if (shared_kv >= 0) {
      const Family& fam = family_of(arch);
      if (!fam.synth_option || !fam.synth_option(o.shape, "shared_kv", shared_kv))
        throw Error(fmt::format("--shared-kv: {} layers do not share caches", arch));
    }
    if (top_k > 0) {
      if (o.shape.ds.idx_heads == 0) throw Error(fmt::format("--top-k: {} has no sparse-attention indexer", arch));
      o.shape.ds.idx_top_k = top_k;
    }
    const auto type = type_from_name(type_str);
    if (!type || !can_quantize_to(*type)) throw Error(fmt::format("--type '{}' is not one of {}", type_str, kWritableTypes));
    o.type = *type;
    o.seed = seed;
    o.n_threads = threads > 0 ? threads : default_thread_count();
    o.name = fmt::format("synth-{}-{}", arch, preset);
    std::unique_ptr<GgufFile> vf;
    if (!vocab_from.empty()) {
      vf = std::make_unique<GgufFile>(GgufFile::open(vocab_from));
      o.vocab_from = vf.get();
    }
    synth_model(o).write_file(out);
    if (!mtp_file.empty()) {
      const Family& fam = family_of(arch);
      if (!fam.split_mtp) throw Error(fmt::format("--mtp-file: {} models keep their MTP block in the model file", arch));
      fam.split_mtp(out, mtp_file);
    }
    if (!mmproj.empty()) {
      // The projector: the first that feeds the architecture, or the one(s) named ("gemma4v+gemma4a": both encoders
      // in one file, as Gemma 4 E2B/E4B's converter writes them).
      std::string name;
      for (const Projector* p : projectors())
        if (p->feeds(arch) && name.empty() && mmproj_projector.empty()) name = p->name;
      if (!mmproj_projector.empty()) {
        for (size_t at = 0; at <= mmproj_projector.size();) {
          const size_t plus = std::min(mmproj_projector.find('+', at), mmproj_projector.size());
          const std::string part = mmproj_projector.substr(at, plus - at);
          bool found = false;
          for (const Projector* p : projectors()) found = found || (p->feeds(arch) && part == p->name);
          if (!found)
            throw Error(fmt::format("--mmproj: Kestrel has no {} projector for {} text models", part, arch));
          at = plus + 1;
        }
        name = mmproj_projector;
      }
      if (name.empty()) throw Error(fmt::format("--mmproj: Kestrel has no projector for {} text models", arch));
      const auto mt = type_from_name(mmproj_type);
      if (!mt) throw Error(fmt::format("--mmproj-type '{}' is not a type name (f32, f16, q8_0)", mmproj_type));
      synth_mmproj(mmproj, name, o.shape.dim, seed, mmproj_preset, *mt, mmproj_layers);
      fmt::print("wrote {} ({} projector, preset {}, output width {})\n", mmproj, name, mmproj_preset, o.shape.dim);
    }
    if (!cvec_out.empty()) {
      const GgufFile base = GgufFile::open(out);
      const int n_layer = static_cast<int>(base.get_int(arch + ".block_count").value_or(0) -
                                           base.get_int(arch + ".nextn_predict_layers").value_or(0));
      write_synth_control_vector(cvec_out, arch, o.shape.dim, n_layer, cvec_seed ? cvec_seed : seed, cvec_std);
      fmt::print("wrote {} (control vector: direction.1 to direction.{}, sd {})\n", cvec_out, n_layer - 1, cvec_std);
    }
    if (!lora_out.empty()) {
      const auto lt = type_from_name(lora_type);
      if (!lt) throw Error(fmt::format("--lora-type '{}': f32 or f16", lora_type));
      lora.type = *lt;
      lora.seed = lora_seed ? lora_seed : seed;
      lora.head = !lora_no_head;
      lora.only.clear();
      for (size_t at = 0; !lora_only.empty() && at <= lora_only.size();) {
        const size_t comma = std::min(lora_only.find(',', at), lora_only.size());
        lora.only.push_back(lora_only.substr(at, comma - at));
        at = comma + 1;
      }
      write_synth_lora(GgufFile::open(out), lora_out, lora);
      fmt::print("wrote {} (LoRA adapter: rank {}, alpha {}, {})\n", lora_out, lora.rank, lora.alpha, lora_type);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto n_vocab = vf ? vf->get("tokenizer.ggml.tokens").as_array().items.size() : o.shape.vocab;
    if (family_of(arch).recipe.attention == LayerRecipe::Attention::Mla)
      fmt::print("wrote {} ({} {}: dim {}, {} layers + {} MTP, {} heads, kv_lora {}, {} experts ({} used, {} shared), vocab {}) in {:.1f} s\n",
                 out, arch, type_name(o.type), o.shape.dim, o.shape.layers, o.shape.ds.nextn, o.shape.heads, o.shape.ds.kv_lora,
                 o.shape.ds.experts, o.shape.ds.experts_used, o.shape.ds.experts_shared, n_vocab, s);
    else if (o.shape.dec.experts > 0)
      fmt::print("wrote {} ({} {}: dim {}, {} layers, {} heads, {} KV heads, {} experts ({} used, FFN {}), vocab {}) in {:.1f} s\n",
                 out, arch, type_name(o.type), o.shape.dim, o.shape.layers, o.shape.heads, o.shape.kv_heads,
                 o.shape.dec.experts, o.shape.dec.experts_used, o.shape.dec.ffn_expert, n_vocab, s);
    else
      fmt::print("wrote {} ({} {}: dim {}, {} layers, {} heads, {} KV heads, FFN {}, vocab {}) in {:.1f} s\n", out, arch,
                 type_name(o.type), o.shape.dim, o.shape.layers, o.shape.heads, o.shape.kv_heads, o.shape.ffn, n_vocab, s);
    return 0;
  });
  std::string archs, presets;
  for (const auto& [a, names] : synth_presets()) {
    archs += (archs.empty() ? "" : ", ") + a;
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    presets += fmt::format("{}{}: {}", presets.empty() ? "" : "; ", a, list);
  }
  cmd->add_option("--arch", arch, "Architecture: " + archs)->capture_default_str();
  cmd->add_option("--preset", preset,
                  "Shape preset (real models' shapes, tiny for tests): " + presets +
                      ". llama: 1b = TinyLlama, 7b = Llama-2-7B, llama3-1b/8b = Llama-3.2-1B / 3.1-8B (rope_freqs), "
                      "mixtral = Mixtral-8x7B; qwen2: 0.5b/7b = Qwen2.5, r1-1.5b = DeepSeek-R1-Distill-Qwen-1.5B; "
                      "qwen2moe: a2.7b = Qwen1.5-MoE; qwen3moe: 30b-a3b; phi3: mini = Phi-3.5-mini; "
                      "deepseek2: tiny (V2-Lite-like), lite (DeepSeek-V2-Lite), v3 (DeepSeek-V3); deepseek32: tiny "
                      "(top-k 4, an MTP block), attn-bench (V3.2's attention widths, 2 dense layers), v32 (DeepSeek-V3.2); "
                      "deepseek4: tiny (ratios 4/0/128/4, top-k 3), flash (DeepSeek-V4-Flash); gpt-oss: tiny (windows of 8, "
                      "top-4 of 8 experts, YaRN over 64), 20b/120b = gpt-oss-20b/120b")
      ->capture_default_str();
  cmd->add_option("--type", type_str, std::string("Weight type: ") + kWritableTypes)->capture_default_str();
  cmd->add_option("-o,--output", out, "GGUF file to write")->required();
  cmd->add_option("--dim", dim, "Override: embedding width");
  cmd->add_option("--layers", layers, "Override: layer count");
  cmd->add_option("--heads", heads, "Override: attention heads");
  cmd->add_option("--kv-heads", kv_heads, "Override: KV heads");
  cmd->add_option("--ffn", ffn, "Override: FFN width");
  cmd->add_option("--vocab", vocab, "Override: vocabulary size (synthetic tokenizer)");
  cmd->add_option("--ctx", ctx, "Override: context length");
  cmd->add_option("--mtp", mtp,
                  "DeepSeek families: multi-token-prediction (nextn) blocks after the layers (default: the preset's; "
                  "deepseek32 tiny and v32, deepseek4 tiny and flash have 1)");
  cmd->add_option("--mtp-file", mtp_file,
                  "deepseek4: write the MTP block to this file apart, as llama.cpp's converter publishes V4 "
                  "(mtp-*.gguf; the trunk stays in -o)");
  cmd->add_option("--top-k", top_k, "deepseek32: the sparse-attention indexer's top-k (default: the preset's)");
  cmd->add_option("--shared-kv", shared_kv,
                  "gemma4: the last layers that read earlier layers' caches (default: the preset's; with --layers, "
                  "the last two layers with a cache must be a sliding one, then a full one)");
  cmd->add_option("--mmproj", mmproj,
                  "Also write a random-weight multimodal projector (mmproj) for the model to this file (gemma3: "
                  "Gemma 3's SigLIP tower; qwen35, qwen35moe: the Qwen3-VL tower; gemma4: Gemma 4's; mistral3, llama, mistral4: "
                  "Pixtral; llama, qwen2: Whisper audio encoders, see --mmproj-projector)");
  cmd->add_option("--mmproj-preset", mmproj_preset,
                  "The projector's shape: tiny (2 layers of 64) for every projector; siglip-400m (gemma3: 896 px, 27 "
                  "layers of 1152, 256 tokens), qwen35 (Qwen3.5's tower: 27 layers of 1152, patch 16), base (gemma4: "
                  "16 layers of 768, patch 16), whisper-large (audio: Whisper large-v3's encoder, 32 layers of 1280), "
                  "large (gemma4a: a Conformer of 12 layers of 1024, Gemma 4 E2B's order of size); A+B: a preset for each of two "
                  "projectors")
      ->capture_default_str();
  cmd->add_option("--mmproj-projector", mmproj_projector,
                  "The projector type when several feed the model (llama: pixtral, the default, ultravox or voxtral "
                  "audio; qwen2: qwen2a audio; gemma4: gemma4v, the default, gemma4a audio, or gemma4v+gemma4a: both "
                  "in one file, as the released files)");
  cmd->add_option("--mmproj-type", mmproj_type, "The projector's matrices: f32, f16 (as converters write them) or q8_0")
      ->capture_default_str();
  cmd->add_option("--mmproj-layers", mmproj_layers, "Override: the projector's vision blocks");
  cmd->add_option("--seed", seed, "Random seed")->capture_default_str();
  cmd->add_option("--lora", lora_out,
                  "Also write a random LoRA adapter (llama.cpp's GGUF adapter form) for the model to this file: every "
                  "attention, FFN, shared-expert and MLA projection matrix, and the output head");
  cmd->add_option("--control-vector", cvec_out,
                  "Also write a random control vector for the model to this file (llama.cpp's direction.L form)");
  cmd->add_option("--control-vector-sd", cvec_std, "Its values' standard deviation")->capture_default_str();
  cmd->add_option("--control-vector-seed", cvec_seed, "Its random seed (0: --seed)");
  cmd->add_option("--lora-rank", lora.rank, "The adapter's rank")->capture_default_str();
  cmd->add_option("--lora-alpha", lora.alpha, "adapter.lora.alpha (0: the key left out)")->capture_default_str();
  cmd->add_option("--lora-seed", lora_seed, "The adapter's random seed (0: --seed)");
  cmd->add_option("--lora-type", lora_type, "The adapter's A and B: f32 or f16")->capture_default_str();
  cmd->add_flag("--lora-no-head", lora_no_head, "Leave the output head out of the adapter");
  cmd->add_flag("--lora-embedding", lora.embedding, "Put the token embedding in the adapter (untied heads only)");
  cmd->add_option("--lora-only", lora_only,
                  "Only the matrices whose names contain one of these (comma-separated, e.g. ffn_,attn_q.)");
  cmd->add_option("--vocab-from", vocab_from, "Copy the tokenizer of this GGUF (sets the vocabulary size)");
  cmd->add_option("-t,--threads", threads, "Threads (0: all cores)");
}

}  // namespace kestrel::cli
