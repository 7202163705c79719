// brisk/brisk.hpp — everything a brisk program includes.
//
//   #include <brisk/brisk.hpp>
//   int add(int a, int b) { return a + b; }
//   BRISK_REMOTE(add);
//   int main(int argc, char** argv) {
//     return brisk::run(argc, argv, [] {
//       auto a = brisk::remote(add, 1, 2);
//       auto b = brisk::remote(add, a, 3);     // waits for a
//       return brisk::get(b) == 6 ? 0 : 1;
//     });
//   }
#pragma once

#include "brisk/core/actor.hpp"
#include "brisk/core/api.hpp"
#include "brisk/core/array.hpp"
#include "brisk/core/checkpoint.hpp"
#include "brisk/core/data.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/core/ids.hpp"
#include "brisk/core/ref.hpp"
#include "brisk/core/run.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/core/status.hpp"
