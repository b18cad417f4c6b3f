// kestrel chat -m MODEL: a conversation in the terminal, through the model's
// chat template, the reply streamed as it is generated. Ctrl-C stops the
// current reply; /clear, /save FILE, /help, /bye; multi-line input between
// lines of """ or with a trailing backslash; Ctrl-D leaves.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>

#include "chat/chat_template.h"
#include "cli/chat_flags.h"
#include "cli/commands.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"

namespace kestrel::cli {

using ojson = nlohmann::ordered_json;

namespace {

std::atomic<bool> g_interrupted{false};
void on_chat_sigint(int) { g_interrupted = true; }

struct ChatFlags {
  LoadOptions engine;
  std::string system, chat_template, chat_template_kwargs;
  int64_t n_predict = 1024;
  GenerationParams gen;
  int64_t seed = -1;
};

enum class Read { Line, Interrupted, End };

// One line from stdin, read with read(2) so that Ctrl-C (EINTR) is noticed
// at the prompt instead of being retried by the stream library.
Read read_line(std::string& line) {
  line.clear();
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) {
      if (g_interrupted.exchange(false)) return Read::Interrupted;
      continue;
    }
    if (n <= 0) return line.empty() ? Read::End : Read::Line;
    if (c == '\n') return Read::Line;
    line += c;
  }
}

void say(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// The next message: one line; lines ending in '\' continue; """ opens and closes a block.
Read read_message(std::string& message) {
  message.clear();
  std::string line;
  say("> ");
  Read r = read_line(line);
  if (r != Read::Line) return r;
  if (line == "\"\"\"") {
    for (;;) {
      say(". ");
      if ((r = read_line(line)) != Read::Line) return r;
      if (line == "\"\"\"") return Read::Line;
      message += (message.empty() ? "" : "\n") + line;
    }
  }
  while (!line.empty() && line.back() == '\\') {
    line.pop_back();
    message += line + "\n";
    say(". ");
    if ((r = read_line(line)) != Read::Line) return r;
  }
  message += line;
  return Read::Line;
}

const char* kHelp =
    "  /clear       forget the conversation (the system message stays)\n"
    "  /save FILE   write the conversation as JSON messages\n"
    "  /bye         leave (or Ctrl-D)\n"
    "  \"\"\"          start or end a message of several lines (or end a line with \\)\n"
    "  Ctrl-C       stop the reply being written\n";

int chat(ChatFlags& f) {
  f.gen.max_tokens = f.n_predict;
  f.gen.sampling.seed = f.seed < 0 ? std::random_device{}() : static_cast<uint64_t>(f.seed);
  f.gen.sampling.validate();
  auto tmpl_file = open_model_file(f.engine.model_path, "");
  ChatTemplate tmpl = ChatTemplate::from_model(*tmpl_file, f.chat_template);
  if (!f.chat_template_kwargs.empty()) tmpl.set_default_kwargs(parse_chat_template_kwargs(f.chat_template_kwargs));
  tmpl_file.reset();
  LoadedModel e = LoadedModel::load(f.engine);
  fmt::print(stderr, "[kestrel] chatting with {} (chat template {}; context {} tokens). /help for commands.\n",
             f.engine.model_path, tmpl.origin(), e.n_ctx);

  struct sigaction sa {};
  sa.sa_handler = on_chat_sigint;  // no SA_RESTART: a read at the prompt returns EINTR
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);

  ojson messages = ojson::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  const size_t kept = messages.size();
  for (std::string text;;) {
    const Read r = read_message(text);
    if (r == Read::End) {
      say("\n");
      return 0;
    }
    if (r == Read::Interrupted) {
      say("\n(Ctrl-D or /bye to leave)\n");
      continue;
    }
    if (text.empty()) continue;
    if (text == "/bye" || text == "/exit" || text == "/quit") return 0;
    if (text == "/help") {
      say(kHelp);
      continue;
    }
    if (text == "/clear") {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(kept), messages.end());
      say("(conversation cleared)\n");
      continue;
    }
    if (text.rfind("/save", 0) == 0) {
      const std::string path = text.size() > 6 ? text.substr(6) : "";
      std::ofstream out(path, std::ios::binary);
      if (path.empty() || !(out << messages.dump(2) << "\n"))
        say(fmt::format("(cannot write '{}': /save FILE)\n", path));
      else
        say(fmt::format("(saved {} messages to {})\n", messages.size(), path));
      continue;
    }
    if (text[0] == '/') {
      say(fmt::format("(unknown command {}; /help lists them)\n", text));
      continue;
    }
    messages.push_back({{"role", "user"}, {"content", text}});
    std::vector<int32_t> prompt;
    try {
      const RenderedChat rc = tmpl.render(messages, nullptr, ojson::object(), true);
      prompt = tmpl.tokenize(*e.tokenizer, rc, false);
      if (static_cast<int64_t>(prompt.size()) >= e.n_ctx)
        throw Error(fmt::format("the conversation has {} tokens, the context {}: /clear to start again", prompt.size(),
                                e.n_ctx));
    } catch (const std::exception& err) {
      messages.erase(messages.end() - 1);
      say(fmt::format("(error: {})\n", err.what()));
      continue;
    }
    g_interrupted = false;
    GenerationParams params = f.gen;
    params.max_tokens = std::min<int64_t>(f.gen.max_tokens, e.n_ctx - static_cast<int64_t>(prompt.size()));
    GenerationCallbacks cb;
    cb.on_text = [](const std::string& s) { say(s); };
    cb.cancelled = [] { return g_interrupted.load(); };
    const GenerationResult res = generate(e, prompt, params, cb);
    say(res.stop_reason == "cancelled" ? " [stopped]\n" : "\n");
    messages.push_back({{"role", "assistant"}, {"content", res.text}});
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  static ChatFlags f;
  auto* cmd = add_command(app, "chat", "Chat with a model in the terminal (its chat template, streamed replies)",
                          [] { return chat(f); });
  cmd->add_option("-m,--model", f.engine.model_path, "GGUF model")->required();
  cmd->add_option("--system", f.system, "System message at the start of the conversation");
  add_chat_template_options(cmd, f.chat_template, f.chat_template_kwargs);
  cmd->add_option("-n,--n-predict", f.n_predict, "Most tokens per reply")->capture_default_str();
  cmd->add_option("-t,--threads", f.engine.n_threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", f.engine.n_ctx, "Context length (0: the model's own)")->capture_default_str();
  add_device_option(cmd, f.engine);
  add_sampling_options(cmd, f.gen.sampling);
  cmd->add_option("-s,--seed", f.seed, "Random seed (-1: random)")->capture_default_str();
  cmd->add_flag("--ignore-eos", f.gen.ignore_eos, "Keep generating past end-of-sequence (until -n)");
}

}  // namespace kestrel::cli
