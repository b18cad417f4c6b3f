#pragma once
// The web chat page `serve` answers GET / with (src/serving/web/chat.html,
// built in at compile time: nothing is fetched from the network).
#include <string_view>

namespace kestrel {

std::string_view chat_page_html();

}  // namespace kestrel
