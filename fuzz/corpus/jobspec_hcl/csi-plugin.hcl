job "plugin" {
  type = "system"
  group "csi" {
    task "plugin" {
      driver = "raw_exec"
      config {
        command = "/usr/local/bin/hostpath-plugin"
        args    = ["--endpoint=${CSI_ENDPOINT}", "--nodeid=${node.unique.id}"]
      }
      csi_plugin {
        id                     = "hostpath"   # required
        type                   = "monolith"   # required: node | controller | monolith
        mount_dir              = "/csi"       # default "/csi"
        stage_publish_base_dir = "/local/csi" # default "/local/csi"; must not be inside mount_dir
        health_timeout         = "30s"        # default 30s
      }
    }
  }
}
