job "example" {
  type = "service"                 # service (default) | batch | system
  group "group" {
    count = 1
    restart { attempts = 2  interval = "30m"  delay = "15s"  mode = "fail" }   # group level, task may override
    volume "data" { type = "host"  source = "test"  read_only = false }
    task "task" {
      driver = "raw_exec"
      config { command = "busybox"  args = ["httpd", "-f", "-p", "8001", "-h", "${NOMAD_TASK_DIR}"] }
      env { GREETING = "hello" }
      kill_signal  = "SIGINT"      # default SIGINT
      kill_timeout = "5s"          # default 5s
      logs { max_files = 10  max_file_size = 10 }     # MiB
      volume_mount { volume = "data"  destination = "data"  read_only = false }
      csi_plugin { id = "whatever"  type = "monolith"  health_timeout = "5s" }   # see csi.md
      resources { cpu = 100  memory = 100 }           # accepted and recorded
    }
  }
}
