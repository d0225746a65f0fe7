#pragma once
// A non-streamed request's handler waits for the whole answer and writes nothing meanwhile, so a client
// that leaves goes unnoticed. cpp-httplib 0.11 hands handlers no socket: find the connection's socket by
// its address pair (unique among this process's sockets) and look at it for an orderly close or a reset.
#include <string>

namespace kvtax::serve {

// The accepted socket whose local port is local_port and whose peer is remote_addr:remote_port; -1 if none.
int find_connection_socket(int local_port, const std::string& remote_addr, int remote_port);

// Whether the peer has closed or reset the connection (it will read nothing more). Data the client sent
// after its request (pipelining) is left unread and does not count as gone.
bool peer_gone(int fd);

}  // namespace kvtax::serve
