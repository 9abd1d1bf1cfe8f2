-- Argo CD health of StatefulSets and Jobs, aware of Trainhook training jobs.
--
-- Install it as both resource.customizations.health.apps_StatefulSet and
-- resource.customizations.health.batch_Job in argocd-cm (examples/argocd/argocd-cm-health.yaml,
-- docs/gitops.md). A custom check replaces Argo CD's built-in one for every object of its kind,
-- so objects without the trainhook.io/framework label get the built-in StatefulSet and Job
-- health, rewritten here with the same statuses and messages.
--
-- A labelled object reports its job's phase, which the sweeper records on every workload of the
-- job when it finishes (trainhook.io/phase, trainhook.io/reason, trainhook.io/finished-at):
-- Healthy when it succeeded, Degraded when it failed, Progressing while it runs.
--
-- While it runs, a job that reports its progress (trainhook.io/report-progress) adds it in a few
-- words, as the sweeper writes it in trainhook.io/progress-text.
--
-- Argo CD runs custom checks without Lua's string library: only `..` builds messages here.

local metadata = obj.metadata or {}
local labels = metadata.labels or {}
local annotations = metadata.annotations or {}
local spec = obj.spec or {}
local status = obj.status or {}

local function result(health, message)
  return { status = health, message = message }
end

-- Argo CD's built-in StatefulSet health (gitops-engine, pkg/health).
local function statefulset_health()
  local observed = status.observedGeneration or 0
  if observed == 0 or (metadata.generation or 0) > observed then
    return result("Progressing", "Waiting for statefulset spec update to be observed...")
  end
  local replicas = spec.replicas
  local ready = status.readyReplicas or 0
  local updated = status.updatedReplicas or 0
  if replicas ~= nil and ready < replicas then
    return result("Progressing", "Waiting for " .. (replicas - ready) .. " pods to be ready...")
  end
  local strategy = spec.updateStrategy or {}
  if strategy.type == "RollingUpdate" and strategy.rollingUpdate ~= nil then
    local partition = strategy.rollingUpdate.partition
    if replicas ~= nil and partition ~= nil and updated < replicas - partition then
      return result("Progressing", "Waiting for partitioned roll out to finish: " .. updated
        .. " out of " .. (replicas - partition) .. " new pods have been updated...")
    end
    return result("Healthy", "partitioned roll out complete: " .. updated
      .. " new pods have been updated...")
  end
  if strategy.type == "OnDelete" then
    return result("Healthy", "statefulset has " .. ready .. " ready pods (" .. updated
      .. " updated)")
  end
  local current = status.currentRevision or ""
  local update = status.updateRevision or ""
  if update ~= current then
    return result("Progressing", "waiting for statefulset rolling update to complete " .. updated
      .. " pods at revision " .. update .. "...")
  end
  return result("Healthy", "statefulset rolling update complete "
    .. (status.currentReplicas or 0) .. " pods at revision " .. current .. "...")
end

-- Argo CD's built-in Job health (gitops-engine, pkg/health).
local function job_health()
  local failed, complete, suspended = false, false, false
  local message, failure = "", ""
  for _, condition in ipairs(status.conditions or {}) do
    if condition.type == "Failed" then
      failed, complete = true, true
      failure = condition.message or ""
    elseif condition.type == "Complete" then
      complete = true
      message = condition.message or ""
    elseif condition.type == "Suspended" then
      complete = true
      message = condition.message or ""
      suspended = suspended or condition.status == "True"
    end
  end
  if not complete then
    return result("Progressing", message)
  elseif failed then
    return result("Degraded", failure)
  elseif suspended then
    return result("Suspended", message)
  end
  return result("Healthy", message)
end

local function builtin()
  if obj.kind == "StatefulSet" then
    return statefulset_health()
  end
  return job_health()
end

if labels["trainhook.io/framework"] == nil then
  return builtin()
end

local job = "training job " .. (labels["trainhook.io/job"] or metadata.name or "")

local function running(message)
  local progress = annotations["trainhook.io/progress-text"]
  if progress ~= nil and progress ~= "" then
    message = message .. "; " .. progress
  end
  return result("Progressing", message)
end

local function finished(verb)
  local message = job .. " " .. verb
  local reason = annotations["trainhook.io/reason"]
  if reason ~= nil and reason ~= "" then
    message = message .. " (" .. reason .. ")"
  end
  local at = annotations["trainhook.io/finished-at"]
  if at ~= nil and at ~= "" then
    message = message .. " at " .. at
  end
  return message
end

local phase = annotations["trainhook.io/phase"]
if phase == "Succeeded" then
  return result("Healthy", finished("succeeded"))
elseif phase == "Failed" then
  return result("Degraded", finished("failed"))
end

if obj.kind == "StatefulSet" then
  local replicas = spec.replicas or 1
  if replicas == 0 then
    return result("Suspended", job .. " scaled to 0")
  end
  return running(job .. " running: " .. (status.readyReplicas or 0) .. " of " .. replicas
    .. " pods ready")
end

-- An Indexed Job whose backoffLimit is reached fails the whole job (the sweeper records it as
-- JobFailed); a suspended one has not started (or is held by a queue such as Kueue).
for _, condition in ipairs(status.conditions or {}) do
  if condition.type == "Failed" and condition.status == "True" then
    return result("Degraded", job .. " failed: " .. (condition.message or condition.reason or ""))
  end
end
if spec.suspend == true then
  return result("Suspended", job .. " suspended")
end
return running(job .. " running: " .. (status.active or 0) .. " active, "
  .. (status.succeeded or 0) .. " of " .. (spec.completions or 1) .. " succeeded")
