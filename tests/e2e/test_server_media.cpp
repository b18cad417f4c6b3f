// Images through `kestrel serve --mmproj`, against llama-server: the requests of tests/reference/mmproj_cells.json's
// "server" cells (recorded from llama-server on the same synth files: its reply's tokens, their logprobs, its
// prompt's length) sent through the stock OpenAI client give the same tokens and logprobs; then through the
// stock clients (openai, @anthropic-ai/sdk, ollama, and the Responses API) one image and question gives the same
// answer everywhere; four image requests at once answer as one at a time; a second turn about the same image
// finds the first turn, image included, in the prefix cache; a corrupt image and a server without an mmproj are
// 400s naming the part (tests/e2e/openai_client/media.mjs drives the clients).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <chrono>

#include "cli_process.h"
#include "core/base64.h"
#include "http_json.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace server_media_test {

using json = nlohmann::json;

const std::string kSource = KESTREL_SOURCE_DIR;

// The cell's files by `kestrel synth --mmproj` (the sha256s the reference cells recorded).
json cell_files(const json& doc, const std::string& cell, test::TempDir& dir, std::string& model, std::string& mmproj) {
  for (const auto& c : doc["cells"]) {
    if (c["name"] != cell) continue;
    model = dir.file(cell + ".gguf");
    mmproj = dir.file(cell + ".mmproj.gguf");
    std::vector<std::string> synth = {"synth"};
    for (const auto& a : c["synth"]) synth.push_back(a);
    synth.insert(synth.end(), {"-o", model, "--mmproj", mmproj});
    const auto made = test::run_kestrel(synth);
    EXPECT_EQ(made.exit_code, 0) << made.err;
    return c;
  }
  ADD_FAILURE() << "no cell " << cell;
  return json();
}

TEST(ServerMedia, StockClientsSendImagesAndGetLlamaServersAnswers) {
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  const json& server = doc["server"];
  ASSERT_GE(server.size(), 2u);
  test::TempDir dir;
  std::string model, mmproj;
  cell_files(doc, server[0]["cell"], dir, model, mmproj);
  json cases = json::array();
  for (json c : server) {
    if (c["cell"] != server[0]["cell"]) continue;  // (other models' requests: their own tests)
    for (auto& part : c["parts"])
      if (part[0] == "image") part[1] = kSource + "/tests/data/mmproj/" + part[1].get<std::string>();
    cases.push_back(c);
  }
  const std::string cases_file = dir.file("cases.json");
  test::write_bytes(cases_file, cases.dump());
  json images = json::array();
  for (const char* f : {"gradient-97x61.png", "checker-40x40.png", "stripes-30x90.png"})
    images.push_back(kSource + "/tests/data/mmproj/" + f);

  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "2048", "--served-model-name", "tiny"});
  int st = 0;
  const std::string out = test::shell("cd " + kSource + "/tests/e2e/openai_client && KESTREL_URL=http://127.0.0.1:" +
                                          std::to_string(s.port()) + " KESTREL_CASES=" + cases_file +
                                          " KESTREL_IMAGES='" + images.dump() + "' node media.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out << s.log();
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));

  // llama-server's answers (its KV cache in F32, as Kestrel's): the same prompt length, tokens, and logprobs within
  // 1e-3.
  ASSERT_EQ(seen["recorded"].size(), cases.size());
  for (size_t i = 0; i < cases.size(); i++) {
    const json& got = seen["recorded"][i];
    const json& want = cases[i];
    EXPECT_EQ(got["prompt_tokens"], want["prompt_tokens"]) << want["name"];
    EXPECT_EQ(got["tokens"], want["tokens"]) << want["name"];
    ASSERT_EQ(got["logprobs"].size(), want["logprobs"].size()) << want["name"];
    for (size_t k = 0; k < want["logprobs"].size(); k++)
      EXPECT_NEAR(got["logprobs"][k].get<double>(), want["logprobs"][k].get<double>(), 1e-3)
          << want["name"] << " token " << k;
  }
  // One image and question, four APIs: one prompt, one answer.
  const json& oa = seen["openai"];
  EXPECT_FALSE(oa["text"].get<std::string>().empty());
  for (const char* api : {"anthropic", "ollama", "responses"}) EXPECT_EQ(seen[api]["text"], oa["text"]) << api << " " << seen;
  EXPECT_EQ(seen["anthropic"]["input_tokens"], oa["prompt_tokens"]);
  EXPECT_EQ(seen["ollama"]["prompt_eval_count"], oa["prompt_tokens"]);
  EXPECT_EQ(seen["responses"]["input_tokens"], oa["prompt_tokens"]);
  // Continuous batching with images: the same answers together and alone.
  EXPECT_EQ(seen["together"], seen["alone"]);
  // The second turn: the first turn's prompt (whole blocks of 16, the image's 16 rows among them) was cached.
  const json& t = seen["turns"];
  EXPECT_GE(t["second_cached"].get<int64_t>(), t["first_prompt"].get<int64_t>() - 16) << t;
  EXPECT_GT(t["second_prompt"].get<int64_t>(), t["first_prompt"].get<int64_t>()) << t;
  // A corrupt image.
  EXPECT_EQ(seen["corrupt"]["status"], 400) << seen["corrupt"];
  EXPECT_NE(seen["corrupt"]["message"].get<std::string>().find("messages[0].content[1]"), std::string::npos)
      << seen["corrupt"];
  // The step log counted the images' tokens as prompt tokens of their requests, and the server kept serving.
  EXPECT_NE(s.log().find("images: gemma3"), std::string::npos) << s.log();
}

// The OpenAI chat request of a recorded server cell: its image parts as data: URIs, its audio parts as input_audio
// (mmproj_cells.py's chat_body).
json chat_body(const json& cell) {
  json content = json::array();
  for (const auto& part : cell["parts"]) {
    if (part[0] == "text") {
      content.push_back({{"type", "text"}, {"text", part[1]}});
      continue;
    }
    const std::string file = test::read_text(kSource + "/tests/data/mmproj/" + part[1].get<std::string>());
    if (part[0] == "audio")
      content.push_back({{"type", "input_audio"}, {"input_audio", {{"data", base64_encode(file)}, {"format", "wav"}}}});
    else
      content.push_back({{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(file)}}}});
  }
  return {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", cell["max_tokens"]},
          {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 1}};
}

// Whether text ends inside a UTF-8 character (llama-server's validate_utf8: a lead byte within the last four
// bytes that lacks its continuation bytes).
bool cut_off(const std::string& text) {
  for (size_t i = 1; i <= 4 && i <= text.size(); i++) {
    const auto c = static_cast<unsigned char>(text[text.size() - i]);
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (need > i) return true;
  }
  return false;
}

// Our per-token logprobs entries grouped as llama-server sends them: while the reply ends inside a UTF-8
// character its tokens are held, and the token that completes it carries their text and its own logprob
// (server-context.cpp's process_token); the text JSON-encoded with invalid bytes replaced, as theirs.
json llama_server_entries(const json& content) {
  std::string all, pending;
  json out = json::array();
  for (const auto& e : content) {
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes.push_back(static_cast<char>(b.get<int>()));
    all += bytes;
    pending += bytes;
    if (cut_off(all)) continue;
    out.push_back({{"token", json::parse(json(pending).dump(-1, ' ', false, json::error_handler_t::replace))},
                   {"logprob", e["logprob"]}});
    pending.clear();
  }
  return out;
}

// A model's recorded llama-server cells (those whose cell name starts with `family`) against kestrel serve:
// llama-server's answers (tokens, logprobs within 1e-3, prompt lengths; the entries grouped as it groups tokens
// that split a UTF-8 character); the same requests at once as one at a time; a second turn about the same image
// finds the first in the prefix cache.
void answers_as_llama_server(const std::string& family, const std::string& projector, bool audio = false) {
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  json cases = json::array();
  for (const auto& c : doc["server"])
    if (c["cell"].get<std::string>().rfind(family, 0) == 0) cases.push_back(c);
  ASSERT_GE(cases.size(), 2u);
  test::TempDir dir;
  std::string model, mmproj;
  cell_files(doc, cases[0]["cell"], dir, model, mmproj);
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "2048", "--max-batch-size", "4"});
  auto c = s.client();
  std::vector<json> alone;
  for (const json& want : cases) {
    EXPECT_EQ(want["cell"], cases[0]["cell"]) << "one server serves every recorded request";
    const json got = test::post_ok(c, "/v1/chat/completions", chat_body(want));
    ASSERT_TRUE(got.is_object()) << s.log();
    alone.push_back(got["choices"][0]["message"]["content"]);
    EXPECT_EQ(got["usage"]["prompt_tokens"], want["prompt_tokens"]) << want["name"];
    const json lp = llama_server_entries(got["choices"][0]["logprobs"]["content"]);
    // Token by token until the replies part; they may part only where the two tokens were a tie (each engine's
    // pick as likely as the other's, within 1e-3: Gemma 4's image rows are 1e-4 off, 6.6e-4 measured here;
    // llama-server is recorded with its KV cache in F32, as Kestrel's: in F16 it is up to 5e-3 off on Gemma 4's),
    // and the texts after that are not compared.
    for (size_t k = 0; k < lp.size() && k < want["tokens"].size(); k++) {
      EXPECT_NEAR(lp[k]["logprob"].get<double>(), want["logprobs"][k].get<double>(), 1e-3)
          << want["name"] << " token " << k;
      if (lp[k]["token"] != want["tokens"][k]) break;
      if (k + 1 == want["tokens"].size()) {
        EXPECT_EQ(lp.size(), want["tokens"].size()) << want["name"] << ": " << got;
      }
    }
  }
  // The requests at once (continuous batching: the images' rows and positions in one step) answer as alone.
  std::vector<std::thread> threads;
  std::vector<json> together(cases.size() * 2);
  for (size_t i = 0; i < together.size(); i++)
    threads.emplace_back([&, i] {
      auto ci = s.client();
      together[i] = test::post_ok(ci, "/v1/chat/completions", chat_body(cases[i % cases.size()]));
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < together.size(); i++)
    EXPECT_EQ(together[i]["choices"][0]["message"]["content"], alone[i % cases.size()]) << i;
  // A second turn about the same image: the first turn's prompt, image rows included, comes from the cache.
  json second = chat_body(cases[0]);
  second["messages"].push_back({{"role", "assistant"}, {"content", alone[0]}});
  second["messages"].push_back({{"role", "user"}, {"content", "And the colours?"}});
  const json first = test::post_ok(c, "/v1/chat/completions", chat_body(cases[0]));
  const json next = test::post_ok(c, "/v1/chat/completions", second);
  const int64_t first_prompt = first["usage"]["prompt_tokens"];
  EXPECT_GE(next["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), first_prompt - 16) << next;
  EXPECT_NE(s.log().find((audio ? "audio: " : "images: ") + projector), std::string::npos) << s.log();
}

// Qwen3.5 with its Qwen3-VL tower: images whose rows take M-RoPE positions, in a hybrid (Gated DeltaNet) model.
TEST(ServerMedia, Qwen35ImagesAnswerAsLlamaServer) { answers_as_llama_server("qwen35", "qwen3vl_merger"); }

// Gemma 4: images attended both ways on the sliding-window layers only, their per-layer inputs the padding
// token's.
TEST(ServerMedia, Gemma4ImagesAnswerAsLlamaServer) { answers_as_llama_server("gemma4-tiny", "gemma4v"); }

// Gemma 4 E2B/E4B's layout: one mmproj with both encoders; a sound alone, and an image and a sound in one message
// (the Conformer's rows between <|audio> and <audio|>).
TEST(ServerMedia, Gemma4AudioAndImagesAnswerAsLlamaServer) { answers_as_llama_server("gemma4-both", "gemma4a", true); }

// Pixtral (Mistral 3): [IMG_BREAK] rows inside the image's rows, [IMG_END] after.
TEST(ServerMedia, PixtralImagesAnswerAsLlamaServer) { answers_as_llama_server("pixtral", "pixtral"); }

// Audio (OpenAI input_audio parts): Ultravox with a llama model, a 16 kHz mono and a 22.05 kHz stereo WAV (mixed
// and resampled as llama.cpp's miniaudio does), one and two per request.
TEST(ServerMedia, UltravoxAudioAnswersAsLlamaServer) { answers_as_llama_server("ultravox", "ultravox", true); }

// Qwen2-Audio: 750 rows a clip between <|audio_bos|> and <|audio_eos|>.
TEST(ServerMedia, Qwen2AudioAnswersAsLlamaServer) { answers_as_llama_server("qwen2a", "qwen2a", true); }

// llama-server's POST /completion with {"prompt_string", "multimodal_data"} (and the same prompt object on
// /v1/completions): the reference cells' prompts and files give the greedy text of llama.cpp's libmtmd ids (the
// cells' recorded ids, decoded), at the marker llama.cpp documents and at the one GET /props gives; the prompt's
// length is libmtmd's; what is wrong is a 400 naming the field.
TEST(ServerMedia, CompletionTakesMultimodalDataAsLlamaServer) {
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  test::TempDir dir;
  for (const char* name : {"gemma3-tiny-seed2-two", "gemma4-both-tiny-seed4"}) {
    std::string model, mmproj;
    const json cell = cell_files(doc, name, dir, model, mmproj);
    test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "2048"});
    auto c = s.client();
    const json props = json::parse(c.Get("/props")->body);
    const std::string marker = props["media_marker"];
    EXPECT_EQ(marker.rfind("<__media_", 0), 0u) << props;
    EXPECT_TRUE(props["modalities"]["vision"].get<bool>()) << props;
    EXPECT_EQ(props["modalities"]["audio"].get<bool>(), std::string(name) == "gemma4-both-tiny-seed4") << props;
    json files = json::array();
    for (const auto& f : cell["images"])
      files.push_back(base64_encode(test::read_text(kSource + "/tests/data/mmproj/" + f.get<std::string>())));
    const int64_t prompt_len = [&] {
      int64_t n = 0;
      for (const auto& ch : cell["chunks"]) n += ch.contains("text") ? static_cast<int64_t>(ch["text"].size()) : ch["image"].get<int64_t>();
      return n;
    }();
    const json ids = cell["ids"];
    const std::string want = test::post_ok(c, "/detokenize", {{"tokens", ids}})["content"];
    std::string prompt = cell["prompt"];
    for (const std::string& m : {std::string("<__media__>"), marker}) {
      std::string text = prompt;
      for (size_t at = text.find("<__media__>"); at != std::string::npos; at = text.find("<__media__>", at + m.size()))
        text.replace(at, 11, m);
      const json body = {{"prompt", {{"prompt_string", text}, {"multimodal_data", files}}},
                         {"n_predict", ids.size()}, {"temperature", 0}, {"ignore_eos", true}};
      const json got = test::post_ok(c, "/completion", body);
      EXPECT_EQ(got["content"], want) << name << " " << m << ": " << got;
      EXPECT_EQ(got["tokens_evaluated"], prompt_len) << name;
      EXPECT_EQ(got["tokens_predicted"], ids.size()) << name;
      EXPECT_EQ(got["stop_type"], "limit") << got;
      EXPECT_FALSE(got.contains("input_extra_tokens_dropped")) << got;
    }
    // The same prompt object on /v1/completions.
    const json oai = test::post_ok(c, "/v1/completions",
                                   {{"prompt", {{"prompt_string", prompt}, {"multimodal_data", files}}},
                                    {"max_tokens", ids.size()}, {"temperature", 0}, {"ignore_eos", true}});
    EXPECT_EQ(oai["choices"][0]["text"], want) << oai;
    EXPECT_EQ(oai["usage"]["prompt_tokens"], prompt_len) << oai;
    // Streamed: the pieces add up to the same text.
    const auto streamed = c.Post("/completion", json({{"prompt", {{"prompt_string", prompt}, {"multimodal_data", files}}},
                                                      {"n_predict", ids.size()}, {"temperature", 0}, {"ignore_eos", true},
                                                      {"stream", true}}).dump(), "application/json");
    ASSERT_TRUE(streamed);
    std::string joined;
    bool stopped = false;
    for (const std::string& line : test::sse_data_lines(streamed->body)) {
      const json e = json::parse(line);
      joined += e["content"].get<std::string>();
      stopped = stopped || e["stop"].get<bool>();
    }
    EXPECT_EQ(joined, want);
    EXPECT_TRUE(stopped);
    // Refusals, each naming the field.
    auto refused = [&](const json& body, const std::string& named) {
      const auto r = c.Post("/completion", body.dump(), "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << body.dump().substr(0, 200) << ": " << r->body;
      EXPECT_NE(r->body.find(named), std::string::npos) << r->body;
    };
    refused({{"prompt", {{"prompt_string", "no marker"}, {"multimodal_data", files}}}}, "prompt.prompt_string");
    refused({{"prompt", {{"prompt_string", prompt}, {"multimodal_data", {"not base64!"}}}}}, "prompt.multimodal_data[0]");
    json garbage = files;
    garbage[0] = base64_encode(std::string("GIF89a this is not a picture"));
    refused({{"prompt", {{"prompt_string", prompt}, {"multimodal_data", garbage}}}}, "prompt.multimodal_data[0]");
    refused({{"prompt", {{"prompt_string", prompt}, {"multimodal_data", files}, {"images", 1}}}}, "prompt.images");
    refused({{"prompt", json::array({"one", "two"})}, {"n_predict", 1}}, "several prompts");
    refused({{"prompt", "x"}, {"n_probs", 2}}, "n_probs");
    const auto echo = c.Post("/v1/completions", json({{"prompt", {{"prompt_string", prompt}, {"multimodal_data", files}}},
                                                      {"echo", true}}).dump(), "application/json");
    EXPECT_EQ(echo->status, 400);
    EXPECT_NE(echo->body.find("echo"), std::string::npos) << echo->body;
  }
  // A server without a projector: the media are refused by name; plain prompts and /props answer.
  std::string model, mmproj;
  cell_files(doc, "gemma3-tiny-seed2", dir, model, mmproj);
  test::ServerProcess plain({"-m", model, "-c", "512"});
  auto c = plain.client();
  const auto r = c.Post("/completion", json({{"prompt", {{"prompt_string", "<__media__>"}, {"multimodal_data", {"AAAA"}}}}}).dump(),
                        "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("prompt.multimodal_data"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("--mmproj"), std::string::npos) << r->body;
  const json text = test::post_ok(c, "/completion", {{"prompt", "Once upon"}, {"n_predict", 3}, {"temperature", 0}});
  EXPECT_EQ(text["tokens_predicted"], 3) << text;
  const json props = json::parse(c.Get("/props")->body);
  EXPECT_FALSE(props.contains("media_marker")) << props;
  EXPECT_FALSE(props["modalities"]["vision"].get<bool>()) << props;
}

// A local image host for --allow-media-urls: the checker PNG, a redirect to it, a redirect loop, a body over the
// 20 MiB of one image, one too slow for the server's --media-url-timeout, a 404.
class ImageHost {
 public:
  ImageHost() {
    png_ = test::read_text(kSource + "/tests/data/mmproj/checker-40x40.png");
    svr_.Get("/cat.png", [this](const httplib::Request&, httplib::Response& res) { res.set_content(png_, "image/png"); });
    svr_.Get("/moved", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/cat.png", 302); });
    svr_.Get("/loop", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/loop", 302); });
    svr_.Get("/big.png", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string((20u << 20) + 1, 'x'), "image/png");
    });
    svr_.Get("/slow.png", [this](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      res.set_content(png_, "image/png");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~ImageHost() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const { return fmt::format("http://127.0.0.1:{}{}", port_, path); }
  const std::string& png() const { return png_; }

 private:
  std::string png_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

// --allow-media-urls: an image named by http URL (OpenAI image_url, Anthropic's url source) is fetched and answers
// as the same image sent inline; a redirect is followed; a loop, a body over the limit, a slow host, a 404 and an
// unreachable https host are 400s naming the part and the reason; the server keeps serving.
TEST(ServerMedia, ImageUrlsAreFetchedWhenAllowed) {
  ImageHost host;
  test::TempDir dir;
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  std::string model, mmproj;
  cell_files(doc, "gemma3-tiny-seed2", dir, model, mmproj);
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "1024", "--allow-media-urls", "--media-url-timeout", "1"});
  auto c = s.client();
  auto ask = [&](const std::string& url) {
    const json body = {{"max_tokens", 6}, {"temperature", 0},
                       {"messages", {{{"role", "user"}, {"content", json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                                                                                  {{"type", "text"}, {"text", "What is it?"}}})}}}}};
    return c.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  const auto inline_answer = ask("data:image/png;base64," + base64_encode(host.png()));
  ASSERT_TRUE(inline_answer && inline_answer->status == 200) << (inline_answer ? inline_answer->body : "");
  const json want = json::parse(inline_answer->body);
  for (const char* path : {"/cat.png", "/moved"}) {
    const auto r = ask(host.url(path));
    ASSERT_TRUE(r) << path;
    ASSERT_EQ(r->status, 200) << path << ": " << r->body;
    const json got = json::parse(r->body);
    EXPECT_EQ(got["choices"][0]["message"]["content"], want["choices"][0]["message"]["content"]) << path;
    EXPECT_EQ(got["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"]) << path;
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {host.url("/loop"), "more than 3 redirects"},
      {host.url("/big.png"), "more than 20971520 bytes"},
      {host.url("/slow.png"), "no answer within 1 s"},
      {host.url("/none.png"), "answered 404"},
      {"https://127.0.0.1:1/cat.png", "fetching https://127.0.0.1:1/cat.png failed"},
  };
  for (const auto& [url, why] : bad) {
    const auto r = ask(url);
    ASSERT_TRUE(r) << url;
    EXPECT_EQ(r->status, 400) << url << ": " << r->body;
    EXPECT_NE(r->body.find("messages[0].content[0].image_url.url"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find(why), std::string::npos) << url << ": " << r->body;
  }
  // Anthropic's url image source, fetched by the same rules.
  const json msg = {{"model", "gemma3-tiny-seed2.gguf"}, {"max_tokens", 6}, {"temperature", 0},
                    {"messages", {{{"role", "user"}, {"content", json::array({{{"type", "image"}, {"source", {{"type", "url"}, {"url", host.url("/cat.png")}}}},
                                                                             {{"type", "text"}, {"text", "What is it?"}}})}}}}};
  const auto a = c.Post("/v1/messages", msg.dump(), "application/json");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200) << a->body;
  // ... and it still serves.
  const auto again = ask(host.url("/cat.png"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

// The web page: an image attached in Debian's chromium goes out as an image_url part and is shown in the message.
TEST(ServerMedia, TheWebPageAttachesAnImageInARealBrowser) {
  const std::string clients = kSource + "/tests/e2e/openai_client";
  ASSERT_TRUE(std::filesystem::exists(clients + "/node_modules/puppeteer-core/package.json"))
      << "the puppeteer-core npm package is missing: run scripts/setup.sh";
  test::TempDir dir;
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  std::string model, mmproj;
  cell_files(doc, "gemma3-tiny-seed2", dir, model, mmproj);
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "1024"});
  int st = 0;
  const std::string out = test::shell("cd " + clients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) +
                                          "/ KESTREL_IMAGE=" + kSource + "/tests/data/mmproj/checker-40x40.png node webchat_media.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  ASSERT_EQ(seen["messages"].size(), 2u) << seen;
  EXPECT_EQ(seen["messages"][0]["cls"], "msg user");
  EXPECT_EQ(seen["messages"][0]["images"], 1) << seen;  // shown in the message
  EXPECT_EQ(seen["messages"][1]["cls"], "msg assistant") << seen;
  EXPECT_FALSE(seen["messages"][1]["content"].get<std::string>().empty()) << seen;
  EXPECT_EQ(seen["sent_parts"], json::array({"image_url", "text"})) << seen;
  EXPECT_EQ(seen["sent_url_prefix"], "data:image/png;base64,") << seen;
  EXPECT_EQ(seen["attached_after"], "") << seen;  // the attachment went with the message
  EXPECT_NE(seen["metrics"].get<std::string>().find("} 1"), std::string::npos) << seen;
  EXPECT_TRUE(seen["console_errors"].empty()) << seen;
  // With the browser's storage full, the next image message is still sent and answered.
  EXPECT_GT(seen["filled"].get<int>(), 0) << seen;
  EXPECT_EQ(seen["full_storage"], json::parse(R"([{"cls": "msg user", "images": 1}, {"cls": "msg assistant", "images": 0}])"))
      << seen;
}

// The web page with an audio encoder too (Gemma 4's file with both): an image and a WAV attached together, shown
// (a player for the audio), sent as image_url and input_audio parts before the text, answered; kept across a reload.
TEST(ServerMedia, TheWebPageAttachesAudioInARealBrowser) {
  const std::string clients = kSource + "/tests/e2e/openai_client";
  ASSERT_TRUE(std::filesystem::exists(clients + "/node_modules/puppeteer-core/package.json"))
      << "the puppeteer-core npm package is missing: run scripts/setup.sh";
  test::TempDir dir;
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  std::string model, mmproj;
  cell_files(doc, "gemma4-both-tiny-seed4", dir, model, mmproj);
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "1024"});
  int st = 0;
  const std::string data = kSource + "/tests/data/mmproj/";
  const std::string out = test::shell("cd " + clients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) +
                                          "/ KESTREL_IMAGE=" + data + "checker-40x40.png KESTREL_AUDIO=" + data +
                                          "tone-16k-mono.wav node webchat_media.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  EXPECT_EQ(seen["attached"], "1 image, 1 audio file") << seen;
  ASSERT_EQ(seen["messages"].size(), 2u) << seen;
  EXPECT_EQ(seen["messages"][0]["images"], 1) << seen;
  EXPECT_EQ(seen["messages"][0]["audio"], 1) << seen;
  EXPECT_EQ(seen["messages"][0]["audio_src"], "data:audio/wav;base64,") << seen;
  EXPECT_FALSE(seen["messages"][1]["content"].get<std::string>().empty()) << seen;
  EXPECT_EQ(seen["sent_parts"], json::array({"image_url", "input_audio", "text"})) << seen;
  EXPECT_EQ(seen["sent_audio"]["format"], "wav") << seen;
  EXPECT_EQ(seen["sent_audio"]["data_prefix"], "UklGR") << seen;  // "RIFF" in base64: the bytes, not a data: URI
  EXPECT_NE(seen["metrics"].get<std::string>().find("} 2"), std::string::npos) << seen;  // both media counted
  EXPECT_EQ(seen["reloaded_audio"], 1) << seen;
  EXPECT_TRUE(seen["console_errors"].empty()) << seen;
}

TEST(ServerMedia, ImagesAreRefusedByNameWithoutAnMmprojAndOutsideTheLimits) {
  test::TempDir dir;
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  std::string model, mmproj;
  cell_files(doc, "gemma3-tiny-seed2", dir, model, mmproj);
  const std::string png = test::read_text(kSource + "/tests/data/mmproj/checker-40x40.png");
  const json image = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + base64_encode(png)}}}};
  auto ask = [&](httplib::Client& c, const json& content) {
    return c.Post("/v1/chat/completions", json({{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", content}}}}}).dump(),
                  "application/json");
  };
  {
    test::ServerProcess s({"-m", model, "-c", "1024"});
    auto c = s.client();
    const auto r = ask(c, json::array({image}));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("messages[0].content[0]"), std::string::npos) << r->body;
    EXPECT_NE(r->body.find("--mmproj"), std::string::npos) << r->body;
  }
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "1024", "--max-images", "2"});
  auto c = s.client();
  const auto ok = ask(c, json::array({image, {{"type", "text"}, {"text", "hi"}}}));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const auto three = ask(c, json::array({image, image, image}));
  EXPECT_EQ(three->status, 400);
  EXPECT_NE(three->body.find("at most 2 per request"), std::string::npos) << three->body;
  json far = image;
  far["image_url"]["url"] = "https://example.com/cat.png";
  const auto url = ask(c, json::array({far}));
  EXPECT_EQ(url->status, 400);
  EXPECT_NE(url->body.find("does not fetch images"), std::string::npos) << url->body;
  json file = image;
  file["image_url"]["url"] = "file:///etc/passwd";
  const auto local = ask(c, json::array({file}));
  EXPECT_EQ(local->status, 400);
  EXPECT_NE(local->body.find("--media-path"), std::string::npos) << local->body;
  json detail = image;
  detail["image_url"]["detail"] = "high";
  const auto d = ask(c, json::array({detail}));
  EXPECT_EQ(d->status, 400);
  EXPECT_NE(d->body.find("detail"), std::string::npos) << d->body;
  const auto audio = ask(c, json::array({{{"type", "input_audio"}, {"input_audio", {{"data", "AAAA"}, {"format", "wav"}}}}}));
  EXPECT_EQ(audio->status, 400);
  EXPECT_NE(audio->body.find("no audio encoder"), std::string::npos) << audio->body;
  // ... and it still serves.
  const auto again = ask(c, json::array({image}));
  EXPECT_EQ(again->status, 200) << again->body;
}

// Audio parts that cannot be read are 400s naming the part and why; a server with only an audio encoder refuses
// images by name; and it keeps serving.
TEST(ServerMedia, AudioIsRefusedByNameWhenItCannotBeRead) {
  test::TempDir dir;
  const json doc = test::read_json(kSource + "/tests/reference/mmproj_cells.json");
  std::string model, mmproj;
  cell_files(doc, "ultravox-llama-tiny-seed1", dir, model, mmproj);
  const std::string wav = test::read_text(kSource + "/tests/data/mmproj/tone-16k-mono.wav");
  auto audio = [](const std::string& bytes, const char* format) {
    json a = {{"data", base64_encode(bytes)}};
    if (format) a["format"] = format;
    return json{{"type", "input_audio"}, {"input_audio", a}};
  };
  test::ServerProcess s({"-m", model, "--mmproj", mmproj, "-c", "1024"});
  auto c = s.client();
  auto ask = [&](const json& content) {
    return c.Post("/v1/chat/completions",
                  json({{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", content}}}}}).dump(),
                  "application/json");
  };
  auto refused = [&](const json& content, const std::string& part, const std::string& why) {
    const auto r = ask(content);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(part), std::string::npos) << r->body;
    EXPECT_NE(r->body.find(why), std::string::npos) << r->body;
  };
  const auto ok = ask(json::array({audio(wav, "wav"), {{"type", "text"}, {"text", "hi"}}}));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  refused(json::array({audio(wav.substr(0, wav.size() / 2), "wav")}), "messages[0].content[0]", "truncated WAV");
  refused(json::array({audio(wav.substr(0, 30), nullptr)}), "messages[0].content[0]", "WAV");
  refused(json::array({audio("OggS and then some bytes", nullptr)}), "messages[0].content[0]", "not a WAV, FLAC or MP3");
  refused(json::array({audio(wav, "mp3")}), "input_audio.format", "not a mp3 file");
  refused(json::array({audio(wav, "ogg")}), "input_audio.format", "not wav, mp3 or flac");
  refused(json::array({{{"type", "input_audio"}, {"input_audio", {{"format", "wav"}}}}}), "input_audio.data", "missing");
  refused(json::array({{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}}),
          "messages[0].content[0]", "no image encoder");
  const auto again = ask(json::array({audio(wav, nullptr)}));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

}  // namespace server_media_test
}  // namespace kestrel
