#!/usr/bin/env bash
# `make delete STACK=<stack> [REGION=<region>]`: deletes a deployed stack
# with the pinned SAM CLI (`sam delete`), then says what is left and what
# it costs, each with the command that removes it:
#   - the database's final snapshot (the cluster's DeletionPolicy: Snapshot);
#   - SAM's managed bucket stack (aws-sam-cli-managed-default, shared by
#     every `sam deploy` of the account in the region: left alone);
#   - log groups Lambda made, that the stack never owned (a function that
#     wrote with no group of the stack's, or after the stack deleted it).
# It refuses to start while the cluster has deletion protection on (the
# stack would end DELETE_FAILED half deleted), and when the deletion fails
# it names each resource CloudFormation could not delete and the escape
# (`delete-stack --retain-resources`). Needs the AWS CLI and credentials
# for the account; the region from REGION, AWS_REGION, AWS_DEFAULT_REGION
# or the CLI's configuration, passed to every command explicitly.
#
#   make delete STACK=bookings
#   make delete STACK=bookings REGION=eu-west-1
set -euo pipefail
cd "$(dirname "$0")/.."
: "${STACK:?set STACK to the stack name (as in make deploy: sam deploy --stack-name)}"
source scripts/lib/region.sh
require_region delete
source scripts/lib/sam.sh
sam_ensure_installed
awsr() { aws --region "$REGION" "$@"; }
text() { awsr "$@" --output text 2>/dev/null || true; }

status=$(text cloudformation describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus')
[ -n "$status" ] || { echo "delete: no stack $STACK in $REGION" >&2; exit 1; }
cluster=$(text cloudformation describe-stack-resources --stack-name "$STACK" --logical-resource-id DatabaseCluster \
  --query 'StackResources[0].PhysicalResourceId')
if [ -n "$cluster" ] && [ "$cluster" != "None" ]; then
  protected=$(text rds describe-db-clusters --db-cluster-identifier "$cluster" --query 'DBClusters[0].DeletionProtection')
  if [ "$protected" = "True" ]; then
    echo "delete: the cluster $cluster has deletion protection on; nothing was deleted. First:" >&2
    echo "  aws rds modify-db-cluster --region $REGION --db-cluster-identifier $cluster --no-deletion-protection --apply-immediately" >&2
    echo "(and DatabaseDeletionProtection=false in samconfig.toml, or the next deploy turns it on again), then make delete again." >&2
    exit 1
  fi
fi

echo "==> sam delete --stack-name $STACK --region $REGION (the database's deletion takes 10-20 minutes)"
"$SAM" delete --stack-name "$STACK" --region "$REGION" --no-prompts || true

status=$(text cloudformation describe-stacks --stack-name "$STACK" --query 'Stacks[0].StackStatus')
if [ -n "$status" ] && [ "$status" != "DELETE_COMPLETE" ]; then
  echo "delete: the stack $STACK is $status. What CloudFormation could not delete, and why:" >&2
  awsr cloudformation describe-stack-events --stack-name "$STACK" --output text \
    --query "StackEvents[?ResourceStatus=='DELETE_FAILED'].[LogicalResourceId,ResourceStatusReason]" >&2 || true
  echo "Fix each, then make delete again; or keep them and delete the rest:" >&2
  echo "  aws cloudformation delete-stack --region $REGION --stack-name $STACK --retain-resources <LogicalId> ..." >&2
  echo "(a retained resource is yours to delete by hand; it may still bill)." >&2
  exit 1
fi
echo "==> the stack $STACK is deleted. What is left:"
left=0
if [ -n "$cluster" ] && [ "$cluster" != "None" ]; then
  while read -r snapshot gib; do
    [ -n "$snapshot" ] && [ "$snapshot" != "None" ] || continue
    left=1
    echo "  the database's final snapshot $snapshot (${gib} GiB; Aurora snapshot storage, about \$0.021 per GiB-month):"
    echo "    aws rds delete-db-cluster-snapshot --region $REGION --db-cluster-snapshot-identifier $snapshot"
  done < <(text rds describe-db-cluster-snapshots --db-cluster-identifier "$cluster" --snapshot-type manual \
    --query 'DBClusterSnapshots[].[DBClusterSnapshotIdentifier,AllocatedStorage]')
fi
while read -r group; do
  [ -n "$group" ] && [ "$group" != "None" ] || continue
  left=1
  echo "  a log group the stack never owned: Lambda made it (with no expiry) when a function wrote with no group"
  echo "  of the stack's, as v0.13.0's operator console did, or after the stack deleted its own (logs storage):"
  echo "    aws logs delete-log-group --region $REGION --log-group-name $group"
done < <(text logs describe-log-groups --log-group-name-prefix "/aws/lambda/$STACK-" --query 'logGroups[].logGroupName' \
  | tr '\t' '\n')
bucket=$(text cloudformation describe-stacks --stack-name aws-sam-cli-managed-default \
  --query "Stacks[0].Outputs[?OutputKey=='SourceBucket'].OutputValue")
if [ -n "$bucket" ] && [ "$bucket" != "None" ]; then
  echo "  SAM's managed bucket stack aws-sam-cli-managed-default (bucket $bucket): shared by every sam deploy"
  echo "  in $REGION, so left alone; pennies a month. To remove it once nothing else deploys with SAM here:"
  echo "    empty the bucket (it is versioned: every version), then"
  echo "    aws cloudformation delete-stack --region $REGION --stack-name aws-sam-cli-managed-default"
fi
[ "$left" = 1 ] || echo "  nothing of $STACK that bills."
