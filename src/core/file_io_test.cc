#include "core/file_io.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/toml_reader.h"

namespace motley {
namespace {
namespace fs = std::filesystem;

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The output rule (#48 item 2), one kind of target at a time.
TEST(OutputRule, ANewOrRegularFileIsReplacedWholeAndNothingElseIsTouched) {
  const fs::path dir = Scratch("motley_out_regular");
  const std::string out = (dir / "out.json").string();
  std::ofstream(dir / "out.json.tmp") << "someone else's";  // a file the writer did not create
  ASSERT_TRUE(AtomicWriteFile(out, "first").ok());
  ASSERT_TRUE(AtomicWriteFile(out, "second").ok());
  EXPECT_EQ(Read(out), "second");
  EXPECT_EQ(Read(dir / "out.json.tmp"), "someone else's");
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) ++entries, (void)e;
  EXPECT_EQ(entries, 2) << "a temporary was left behind";
}

TEST(OutputRule, ADeviceOrAPipeIsWrittenThroughAndStaysWhatItIs) {
  const fs::path dir = Scratch("motley_out_device");
  const fs::path null = dir / "null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)  // /dev/null's numbers, a private node
    GTEST_SKIP() << "mknod needs root here";
  ASSERT_TRUE(AtomicWriteFile(null.string(), "into the void").ok());
  struct stat st {};
  ASSERT_EQ(::lstat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a file";

  const fs::path pipe = dir / "pipe";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = Read(pipe); });
  const Status s = AtomicWriteFile(pipe.string(), "through the pipe");
  reader.join();
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got, "through the pipe");
  ASSERT_EQ(::lstat(pipe.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(OutputRule, ALinkIsFollowedAndStaysALink) {
  const fs::path dir = Scratch("motley_out_link");
  std::ofstream(dir / "target") << "old";
  fs::create_symlink(dir / "target", dir / "link");
  ASSERT_TRUE(AtomicWriteFile((dir / "link").string(), "new").ok());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link")));
  EXPECT_EQ(Read(dir / "target"), "new");
  fs::create_symlink(dir / "elsewhere", dir / "dangling");  // its target is created
  ASSERT_TRUE(AtomicWriteFile((dir / "dangling").string(), "made").ok());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "dangling")));
  EXPECT_EQ(Read(dir / "elsewhere"), "made");
}

TEST(OutputRule, ADirectoryIsRefusedNamingItAndTheFix) {
  const fs::path dir = Scratch("motley_out_dir");
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "keep") << "kept";
  const Status s = AtomicWriteFile((dir / "sub").string(), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find((dir / "sub").string() + ": is a directory"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("give a file path"), std::string::npos) << s.message();
  EXPECT_EQ(Read(dir / "sub" / "keep"), "kept");
}

// The readers' side (#48 item 4): a whole-file input is never a device, a pipe or a folder
// (`--profile /dev/zero` was read until the host ran out of memory).
TEST(InputRule, AWholeFileInputIsNeverADeviceOrAFolder) {
  for (const char* path : {"/dev/zero", "/tmp"}) {
    const Result<std::string> text = ReadTextFile(path);
    ASSERT_FALSE(text.ok()) << path;
    EXPECT_NE(text.status().message().find(std::string(path) + ": is not a regular file"), std::string::npos)
        << text.status().message();
  }
  EXPECT_EQ(ReadTextFile("/no/such/file").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace motley

namespace motley {
namespace {

// #50: a rank checks, before any step, that it can write the shared checkpoint folder.
TEST(CheckFolderWritable, ARankThatCannotWriteTheFolderSaysWhoAndWhere) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "writable-check";
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(CheckFolderWritable((dir / "run").string(), "rank 0").ok());  // made, written, left clean
  EXPECT_TRUE(std::filesystem::is_empty(dir / "run"));
  std::ofstream(dir / "a-file") << "x";
  const Status file = CheckFolderWritable((dir / "a-file").string(), "rank 3 on node-b (10.0.0.2)");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.message().find("rank 3 on node-b (10.0.0.2) cannot write the checkpoint folder " +
                                (dir / "a-file").string()),
            std::string::npos)
      << file.message();
  EXPECT_NE(file.message().find("shared by every host"), std::string::npos);
  EXPECT_FALSE(CheckFolderWritable("/proc/motley-cannot-be-made", "rank 1").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley
