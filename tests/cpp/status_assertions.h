// GoogleTest assertions on a Status: the code, the argument it names and a phrase of its message
// (the validation tests check every rule's wording this way).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "flashattn/flashattn.h"

namespace flashattn::test {

inline ::testing::AssertionResult IsError(const Status& status, ErrorCode code, std::string_view argument,
                                          std::string_view phrase) {
  if (status.ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  if (status.code() != code)
    return ::testing::AssertionFailure() << "code " << int(status.code()) << " instead of " << int(code) << ": "
                                         << status.message();
  if (status.argument() != argument)
    return ::testing::AssertionFailure() << "argument '" << status.argument() << "' instead of '" << argument
                                         << "': " << status.message();
  if (status.message().find(phrase) == std::string::npos)
    return ::testing::AssertionFailure() << "message lacks \"" << phrase << "\": " << status.message();
  if (status.message().find("argument '" + std::string(argument) + "'") == std::string::npos)
    return ::testing::AssertionFailure() << "message does not name the argument: " << status.message();
  return ::testing::AssertionSuccess();
}

}  // namespace flashattn::test

#define EXPECT_INVALID(status, argument, phrase) \
  EXPECT_TRUE(::flashattn::test::IsError((status), ::flashattn::ErrorCode::InvalidArgument, (argument), (phrase)))
#define EXPECT_UNSUPPORTED(status, argument, phrase) \
  EXPECT_TRUE(::flashattn::test::IsError((status), ::flashattn::ErrorCode::Unsupported, (argument), (phrase)))
#define EXPECT_OK(status)                     \
  do {                                        \
    const ::flashattn::Status st_ = (status); \
    EXPECT_TRUE(st_.ok()) << st_.message();   \
  } while (0)
