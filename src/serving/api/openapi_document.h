#pragma once
// The OpenAPI 3.1 description of every endpoint `serve` answers (src/serving/api/openapi.json, built in at compile
// time), served at GET /openapi.json. tests/e2e/test_server_openapi.cpp holds it to the routing table: every
// route described, every described path served.
#include <string_view>

namespace kestrel {

std::string_view openapi_json();

}  // namespace kestrel
