#include "testing/runtime_fixture.hpp"
