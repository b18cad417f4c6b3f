#include "runtime/text_stream.h"

#include <algorithm>
#include <utility>

namespace kestrel {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stops, int32_t prev_token,
                       std::vector<int32_t> shown_control)
    : tok_(tokenizer), stops_(std::move(stops)), shown_control_(std::move(shown_control)), prev_(prev_token) {
  const Vocab& v = tok_.vocab();
  strip_leading_space_ = v.kind == Vocab::Kind::Spm && v.add_space_prefix;
}

std::string TextStream::push(int32_t token, bool& stopped) {
  const bool shown = std::find(shown_control_.begin(), shown_control_.end(), token) != shown_control_.end();
  std::string piece = tok_.token_to_piece(token, shown);
  // SentencePiece drops the dummy-prefix space of the first word after BOS.
  if (strip_leading_space_ && prev_ == tok_.vocab().bos && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
  prev_ = token;
  return filter(utf8_.push(piece), stopped);
}

std::string TextStream::finish(bool& stopped) {
  std::string out = filter(utf8_.flush(), stopped);
  if (!stopped) out += std::exchange(pending_, {});
  return out;
}

std::string TextStream::filter(const std::string& text, bool& stopped) {
  stopped = false;
  pending_ += text;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t at = pending_.find(s);
    if (at != std::string::npos) {
      stopped = true;
      matched_ = s;
      std::string out = pending_.substr(0, at);
      pending_.clear();
      return out;
    }
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_)
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; k--)
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

}  // namespace kestrel
