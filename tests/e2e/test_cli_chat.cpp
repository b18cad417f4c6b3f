// `kestrel chat` as a user runs it: piped (the reply equals the generator's
// greedy text for the template's prompt; /save, /clear, multi-line input) and
// in a pseudo-terminal through `script`, where Ctrl-C stops a long reply at
// once and the chat goes on.
#include <gmock/gmock.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "chat/chat_template.h"
#include "cli_process.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

using test::kStories;

// What the chat must answer to one user message: the built-in chatml prompt, greedy.
std::string expected_reply(const std::string& user, int n) {
  LoadOptions o;
  o.model_path = kStories;
  o.n_threads = 1;
  o.n_ctx = 512;
  LoadedModel e = LoadedModel::load(o);
  const ChatTemplate t("chatml", builtin_chat_template("chatml"));
  const RenderedChat rc =
      t.render(ojson::array({{{"role", "user"}, {"content", user}}}), nullptr, ojson::object(), true);
  GenerationParams p;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  return generate(e, e.tokenizer->encode(rc.text, true, rc.content), p).text;
}

TEST(CliChat, PipedConversationSaveClearAndMultiLine) {
  test::TempDir dir;
  const std::string saved = dir.file("conv.json");
  test::write_bytes(dir.file("in.txt"), "Hello there\n/save " + saved + "\n/clear\nHello there\n\"\"\"\nline one\nline two\n\"\"\"\n/nope\n/bye\n");
  const std::string cmd = test::shell_quote(KESTREL_BINARY) + " chat -m " + test::shell_quote(kStories) +
                          " --temp 0 -n 30 -c 512 -t 1 < " + dir.file("in.txt") + " > " + dir.file("out.txt") + " 2> " +
                          dir.file("err.txt");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_text(dir.file("err.txt"));
  const std::string out = test::read_text(dir.file("out.txt"));
  const std::string reply = expected_reply("Hello there", 30);
  ASSERT_FALSE(reply.empty());
  // The same answer twice: after /clear the second question is asked afresh.
  const size_t first = out.find(reply);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(reply, first + reply.size()), std::string::npos) << out;
  EXPECT_THAT(out, HasSubstr("(saved 2 messages to " + saved + ")"));
  EXPECT_THAT(out, HasSubstr("(conversation cleared)"));
  EXPECT_THAT(out, HasSubstr("(unknown command /nope; /help lists them)"));
  const ojson conv = ojson::parse(test::read_text(saved));
  ASSERT_EQ(conv.size(), 2u);
  EXPECT_EQ(conv[0]["content"], "Hello there");
  EXPECT_EQ(conv[1]["role"], "assistant");
  EXPECT_EQ(conv[1]["content"], reply);
  EXPECT_THAT(test::read_text(dir.file("err.txt")), HasSubstr("chat template built-in chatml"));
}

TEST(CliChat, CtrlCStopsALongReplyAndTheChatGoesOn) {
  test::TempDir dir;
  // Random weights, wide enough that 3000 tokens take ~20 s on one thread.
  const std::string model = dir.file("slow.gguf");
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--dim", "512", "--layers", "8", "--ffn",
                               "1536", "--ctx", "4096", "--vocab-from", kStories, "--type", "q8_0", "-o", model})
                .exit_code,
            0);
  const std::string out = dir.file("out.txt");
  // exec: the chat itself, not a shell waiting for it, is in the terminal's foreground group. A shell
  // there (script(1) runs $SHELL -c, which need not exec its last command) dies of the Ctrl-C itself,
  // and script then reports 130 though the chat went on and left cleanly.
  const std::string chat = "exec " + test::shell_quote(KESTREL_BINARY) + " chat -m " + test::shell_quote(model) +
                           " --temp 0 -n 3000 --ignore-eos -c 4096 -t 1";
  // script(1) gives the chat a pseudo-terminal: a Ctrl-C byte becomes SIGINT, as from a keyboard.
  const std::string cmd = "SHELL=/bin/sh script -qfec " + test::shell_quote(chat) + " /dev/null > " + out + " 2>&1";
  test::write_bytes(out, "");  // read from the start, before the shell opens it
  FILE* keys = popen(cmd.c_str(), "w");
  ASSERT_NE(keys, nullptr);
  const auto type = [&](const std::string& s) {
    std::fputs(s.c_str(), keys);
    std::fflush(keys);
  };
  // Whatever fails below, the chat is stopped and left before the directory goes.
  struct Leave {
    FILE*& keys;
    ~Leave() {
      if (!keys) return;
      std::fputs("\x03\n/bye\n", keys);
      pclose(keys);
    }
  } leave{keys};
  const auto wait_for = [&](const std::function<bool(const std::string&)>& ready, double seconds) {
    const auto t0 = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
      if (ready(test::read_text(out))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  ASSERT_TRUE(wait_for([](const std::string& o) { return o.find("> ") != std::string::npos; }, 30)) << test::read_text(out);
  type("Tell me a story\n");
  size_t echoed = 0;
  ASSERT_TRUE(wait_for([&](const std::string& o) {
    echoed = o.find("Tell me a story");
    return echoed != std::string::npos && o.size() > echoed + 200;  // the reply is streaming
  }, 30)) << test::read_text(out);
  const auto pressed = Clock::now();
  type("\x03");
  EXPECT_TRUE(wait_for([](const std::string& o) { return o.find("[stopped]") != std::string::npos; }, 10))
      << test::read_text(out);
  const double stop_s = std::chrono::duration<double>(Clock::now() - pressed).count();
  EXPECT_LT(stop_s, 3.0);  // at once, not after the 3000 tokens (~20 s)
  // Ctrl-C at the prompt says how to leave; the chat is still there.
  ASSERT_TRUE(wait_for([](const std::string& o) { return o.rfind("> ") > o.find("[stopped]"); }, 10));
  type("\x03");
  EXPECT_TRUE(wait_for([](const std::string& o) { return o.find("(Ctrl-D or /bye to leave)") != std::string::npos; }, 10))
      << test::read_text(out);
  type("/bye\n");
  const int status = pclose(std::exchange(keys, nullptr));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << "\n" << test::read_text(out);
}

}  // namespace
}  // namespace kestrel
