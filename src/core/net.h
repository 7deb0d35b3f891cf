// Small network helpers shared by the launcher and the tests.
#pragma once

namespace motley {

/// A TCP port on the loopback interface that nobody listens on now.
int FreeTcpPort();

}  // namespace motley
